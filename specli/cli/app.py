"""The Typer apps every command registers on, and the root callback (`--version`)."""

from __future__ import annotations

from typing import Annotated

import typer
from typer.core import TyperCommand, TyperGroup

from specli import __version__


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
    """A command group whose --help shows no value for flags."""

    def get_params(self, ctx):  # type: ignore[no-untyped-def]
        return _flags_without_metavar(super().get_params(ctx))


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
