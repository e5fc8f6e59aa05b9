"""`python -m specli ...`: the same as the `specli` command (and `python -m specli.cli`)."""

from specli.cli import main

main()
