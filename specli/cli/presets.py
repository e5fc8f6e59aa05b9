"""`specli presets list` and `specli presets show NAME`."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specli.cli.app import Command, presets_app
from specli.cli.common import user_errors
from specli.cli.options import DebugOpt, JsonOpt
from specli.errors import SpecliError
from specli.models.memory import PLAN_CONTEXT, human, preset_context, preset_estimate
from specli.presets import PresetEntry, load_preset_file, preset_entries, preset_to_dict, resolve_preset
from specli.readiness import Memory, absent_drafters, free_memory, readiness
from specli.strategies import Strategy


def _origin(entry: PresetEntry) -> str:
    """Where a listed preset comes from: shipped, or a user one (with the shipped one it shadows)."""
    if not entry.user:
        return "shipped"
    return "user (shadows shipped)" if entry.shadows is not None else "user"


def _preset_row(entry: PresetEntry, free: Memory) -> list[str]:
    name, origin = escape(entry.name), escape(_origin(entry))
    try:
        p = load_preset_file(entry.path)
    except SpecliError as e:
        return [name, origin, "[red]invalid[/]", escape(str(e).splitlines()[0]), "", "", "", ""]
    estimate = preset_estimate(p)
    ready = readiness(p, estimate, free)
    return [
        name,
        origin,
        p.strategy,
        p.target.model,
        _drafter_label(p),
        p.target.quantization,
        human(estimate),
        "[green]yes[/]" if ready.runs else escape(ready.label()),
    ]


def _drafter_label(p: Any) -> str:
    if p.strategy == Strategy.LOOKUP:
        return f"suffix match {p.speculation.ngram_min}..{p.speculation.ngram_max}"
    if p.strategy == Strategy.SELF:
        return f"exit layer {p.speculation.exit_layer}" if p.speculation.exit_layer else "early exit"
    return p.draft.model if p.draft else ""


def _preset_json(preset: Any, free: Memory | None = None) -> dict[str, Any]:
    """preset_to_dict plus the memory estimate (bytes, or None when a model's architecture is unknown)
    and, with `free`, whether it runs here: runs_here, needs (what is missing), memory_fits (None when
    unknown), free_memory_bytes and memory_device ("gpu" or "cpu")."""

    data = preset_to_dict(preset)
    data["estimated_memory_bytes"] = preset_estimate(preset, PLAN_CONTEXT)
    data["estimated_memory_context"] = preset_context(preset, PLAN_CONTEXT)  # what the estimate holds
    if free is not None:
        ready = readiness(preset, data["estimated_memory_bytes"], free)
        data["runs_here"] = ready.runs
        data["needs"] = [need.text for need in ready.needs]
        data["memory_fits"] = ready.fits
        data["free_memory_bytes"] = free.free_bytes
        data["memory_device"] = free.device
    return data


def _memory_line(preset: Any) -> str:

    total = preset_estimate(preset, PLAN_CONTEXT)
    if total is None:
        return "estimated memory: unknown until the model's config is available (local folder or cache)"
    tokens = preset_context(preset, PLAN_CONTEXT)  # a model with a shorter context holds fewer
    return f"estimated memory: {human(total)} (weights, KV cache for {tokens} tokens, 10% workspace)"


@presets_app.command("list", cls=Command)
def presets_list(as_json: JsonOpt = False, debug: DebugOpt = False) -> None:
    """List the presets: built-in ones and yours ($SPECLI_PRESETS, ~/.config/specli/presets)."""

    with user_errors(debug):
        found = preset_entries()
        free = free_memory()
        if as_json:
            out = []
            for entry in found:
                origin = {"user": entry.user, "shadows": str(entry.shadows) if entry.shadows else None}
                try:
                    out.append(_preset_json(load_preset_file(entry.path), free) | origin)
                except SpecliError as e:
                    out.append({"name": entry.name, "source": str(entry.path), "error": str(e)} | origin)
            typer.echo(json.dumps(out, indent=2))
            return
        columns = ("name", "from", "strategy", "target", "drafter", "quant", "memory", "runs here")
        table = Table(*columns, title="specli presets", caption=_caption(found, free))
        for column in table.columns:
            column.overflow = "fold"
        table.columns[0].no_wrap = table.columns[1].no_wrap = True
        for entry in found:
            table.add_row(*_preset_row(entry, free))
        out = Console()
        (out if out.is_terminal else Console(width=150)).print(table)


def _caption(entries: list[PresetEntry], free: Memory) -> str:
    """What 'runs here' compared with, and the folders the user presets came from (and what shadowing
    means)."""
    lines = [f"runs here: its models are here and its estimate fits ({free.label()})"]
    folders = list(dict.fromkeys(str(e.path.parent) for e in entries if e.user))
    if folders:
        shadow = (
            "; a user preset replaces the shipped one of its name" if any(e.shadows for e in entries) else ""
        )
        lines.append(f"user presets from {', '.join(folders)}{shadow}")
    return escape("\n".join(lines))


@presets_app.command("show", cls=Command)
def presets_show(
    name: Annotated[str, typer.Argument(help="Preset name or YAML path.")],
    as_json: JsonOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Show one preset in full."""

    with user_errors(debug):
        preset = resolve_preset(name)
        data = _preset_json(preset)
        if as_json:
            typer.echo(json.dumps(data, indent=2))
        else:
            data = preset_to_dict(preset)
            typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())
            if preset.strategy_why:
                typer.echo(f"# why {preset.strategy}: {preset.strategy_why}")
            typer.echo(f"# {_memory_line(preset)}")
            for strategy, need in absent_drafters(preset):  # what --strategy draft / eagle would stop at
                typer.echo(f"# --strategy {strategy}: {need.text}")
