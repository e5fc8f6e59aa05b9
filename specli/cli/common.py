"""What every command shares: the stderr console, and turning failures into one or two lines and an
exit code (2 usage, 1 runtime; `--debug` or SPECLI_DEBUG=1 for the traceback)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from specli.errors import SpecliError


def stderr_console(no_color: bool = False) -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True, no_color=no_color or None)


@contextmanager
def user_errors(debug: bool) -> Iterator[None]:
    """Turn failures into one or two lines on stderr and an exit code (2 usage, 1 runtime)."""
    debug = debug or os.environ.get("SPECLI_DEBUG") == "1"
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:  # Ctrl-C while starting up (imports, loading) or outside a generation loop
        if debug:
            raise
        stderr_console().print("interrupted.", markup=False)
        raise typer.Exit(130) from None
    except SpecliError as e:
        if debug:
            raise
        stderr_console().print(f"[bold red]error:[/] {escape(e.message)}", markup=True, highlight=False)
        if e.hint:
            stderr_console().print(e.hint, markup=False)
        raise typer.Exit(e.exit_code) from None
    except Exception as e:  # a bug or an environment failure: say what, point to --debug
        if debug:
            raise
        stderr_console().print(
            f"[bold red]error:[/] {type(e).__name__}: {escape(str(e))}", markup=True, highlight=False
        )
        stderr_console().print("Run again with --debug for the full traceback.", markup=False)
        raise typer.Exit(1) from None


STUCK_EXIT_S = 3.0  # after Ctrl-C while loading, how long the usual way out may take


@contextmanager
def ctrl_c_ends_loading() -> Iterator[None]:
    """While models load: Ctrl-C raises KeyboardInterrupt as usual (one line, exit 130, or the traceback
    with --debug), and if the process is still alive STUCK_EXIT_S later — a thread pool's shutdown
    waiting on a stalled download holds the interrupt until its workers end — it says so and exits 130
    at once. Main thread only (a signal handler cannot be set elsewhere); a process started with Ctrl-C
    ignored (a shell's background job) is left as it is."""
    ignored = signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, None)  # a background job keeps ignoring it
    if ignored or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stuck() -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stderr.write("interrupted.\n")
        sys.stderr.flush()
        os._exit(130)

    def interrupt(signum: int, frame: Any) -> None:
        timer = threading.Timer(STUCK_EXIT_S, stuck)
        timer.daemon = True
        timer.start()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def quiet_transformers() -> None:
    """Our own status line replaces transformers' per-file progress bars and advisory warnings."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
