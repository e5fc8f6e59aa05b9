"""The `specli` command line. Thin: parse, resolve, call the API, hand rounds to a renderer.

One module per command (generate, explain, bench, presets list/show, serve, export, train), each
registering on the app in `app.py`; options are defined once in `options.py`, loading in `run.py`, error
handling in `common.py`, and what is read from the user besides options (the prompt from an argument,
stdin or a file, the keys of `explain --step`) in `prompt_input.py`.
Importing this package imports neither torch nor transformers (`specli --help` stays fast).
"""

from __future__ import annotations

import os
import sys
import threading

from specli.cli import bench, explain, export, generate, presets, serve, train  # noqa: F401  (each registers its commands)
from specli.cli.app import app
from specli.cli.bench import parse_sweep

__all__ = ["app", "main", "parse_sweep"]


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        app(args=argv, prog_name="specli")
    except SystemExit as e:
        if e.code == 130:  # Ctrl-C: output is written; do not wait for worker threads (downloads, loading)
            _exit_now(130)
        raise
    except KeyboardInterrupt:  # before a command started
        _exit_now(130)


def _exit_now(code: int) -> None:
    """Exit at once when worker threads are still running: a normal exit would join them (a stalled
    download holds the exit), and a second Ctrl-C there prints their traceback."""
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
