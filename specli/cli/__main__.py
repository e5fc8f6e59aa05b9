"""`python -m specli.cli ...`: the same as the `specli` command."""

from specli.cli import main

main()
