"""The Typer apps every command registers on, and the root callback (`--version`)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from specli.cli.common import stderr_console
from specli.version import __version__


def _flags_without_metavar(params: list) -> list:
    """On/off flags (--fixed-k, --help, ...) take no value: show none in --help (typer shows `<bool>`)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class Command(TyperCommand):
    """A command whose --help shows no value for flags."""

    def get_params(self, ctx):  # type: ignore[no-untyped-def]
        return _flags_without_metavar(super().get_params(ctx))


class Group(TyperGroup):
    """A command group whose --help shows no value for flags, and whose usage errors (a missing argument,
    an unknown option, a value out of an option's range) are one or two plain lines on stderr, exit 2,
    as specli's own are (typer draws them in a Rich box)."""

    def get_params(self, ctx):  # type: ignore[no-untyped-def]
        return _flags_without_metavar(super().get_params(ctx))

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # type: ignore[no-untyped-def]
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:  # not standalone: click's exceptions come here instead of typer's Rich panel
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.TyperException as e:  # click's ClickException (UsageError, BadParameter, ...)
            show_click_error(e)
            sys.exit(e.exit_code)
        except typer.Abort:  # end of input at a prompt
            stderr_console().print("aborted.", markup=False)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)  # typer returns Exit's code when not standalone


def show_click_error(e: Exception) -> None:
    """click's error as one plain line naming the problem (whitespace folded) and one pointing to --help;
    nothing for a bare `specli` (its help was printed already)."""
    if type(e).__name__ == "NoArgsIsHelpError":
        return
    message = " ".join(e.format_message().split()) if hasattr(e, "format_message") else str(e)
    console = stderr_console()
    console.print(f"[bold red]error:[/] {escape(message[:1].lower() + message[1:])}", highlight=False)
    ctx = getattr(e, "ctx", None)
    if ctx is not None:
        console.print(f"Run '{ctx.command_path} --help' for its options.", markup=False)


app = typer.Typer(
    cls=Group,
    name="specli",
    help="Local speculative generation you can see: exact output, faster, every draft shown.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
presets_app = typer.Typer(
    cls=Group, help="List and inspect presets (target/drafter pairs with settings).", no_args_is_help=True
)
app.add_typer(presets_app, name="presets")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"specli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """specli: speculative decoding on your own machine."""
