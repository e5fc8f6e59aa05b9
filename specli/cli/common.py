"""What every command shares: the stderr console, and turning failures into one or two lines and an
exit code (2 usage, 1 runtime; `--debug` or SPECLI_DEBUG=1 for the traceback)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

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


def quiet_transformers() -> None:
    """Our own status line replaces transformers' per-file progress bars and advisory warnings."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
