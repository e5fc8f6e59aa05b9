"""Options shared by the commands, defined once: the `Annotated` aliases each command's signature uses,
and the groups they are gathered into (`ModelOptions`: which models and how to load them;
`GenerationOptions`: setting overrides, None leaving the preset's)."""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from specli.errors import SpecliError, UsageError
from specli.presets import resolve_preset
from specli.prompt_input import check_text
from specli.settings import Settings, resolve_settings
from specli.threads import AUTO

DebugOpt = Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]


def _tiny_default(field: str) -> str:
    """ "Default: the preset's (tiny: 4)." for --help: the value the default preset gives, and where it
    comes from (read from the preset itself, so the help cannot drift from it)."""
    settings = _tiny_settings()
    if settings is None:
        return " Default: the preset's."
    return f" Default: the preset's (tiny: {getattr(settings, field)})."


@functools.cache
def _tiny_settings() -> Settings | None:
    try:
        return resolve_settings(resolve_preset("tiny"))
    except SpecliError:
        return None


PresetOpt = Annotated[
    str | None,
    typer.Option(help="Preset name or YAML path (see `specli presets list`); default: tiny (embedded)."),
]
TargetOpt = Annotated[str | None, typer.Option(help="Target model: local folder or hub id.")]
DraftOpt = Annotated[
    str | None,
    typer.Option(
        help="Drafter model sharing the target's tokenizer; with --strategy eagle, the EAGLE head "
        "(a folder, hub id or embedded:tiny-eagle3)."
    ),
]
StrategyOpt = Annotated[
    str | None,
    typer.Option(
        help="draft (a drafter model), lookup (n-grams of prompt + output), self (the target's first "
        "layers draft), eagle (an EAGLE head on the target's hidden states) or none (plain decoding). "
        "Default: the preset's."
    ),
]
ExitLayerOpt = Annotated[
    int | None,
    typer.Option(help="self: layers that draft (1 .. layers-1; default: the preset's, else a quarter)."),
]
FixedKOpt = Annotated[
    bool,
    typer.Option(
        "--fixed-k",
        help="Draft exactly --num-draft-tokens every round (by default each round chooses its k up to it, "
        "from measured acceptance and costs).",
    ),
]
DraftPMinOpt = Annotated[
    float | None,
    typer.Option(
        "--draft-p-min",
        help="End a draft before a token the drafter gives less probability than this (0 = off)."
        + _tiny_default("draft_p_min"),
    ),
]
NgramMinOpt = Annotated[int | None, typer.Option(help="lookup: shortest n-gram to match (default 1).")]
NgramMaxOpt = Annotated[int | None, typer.Option(help="lookup: longest n-gram to match (default 3).")]
DraftTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--num-draft-tokens",
        "-k",
        help="The most tokens a round drafts (k); each round chooses its own up to it unless --fixed-k."
        + _tiny_default("num_draft_tokens")
        + " lookup: 16 unless -k or a lookup preset sets it.",
    ),
]
MaxNewOpt = Annotated[
    int | None, typer.Option(help="Most tokens to generate." + _tiny_default("max_new_tokens"))
]
TemperatureOpt = Annotated[
    float | None, typer.Option(help="0 = greedy; > 0 samples." + _tiny_default("temperature"))
]
TopKOpt = Annotated[
    int | None,
    typer.Option(help="Keep the k most likely tokens (0 = off; sampling only)." + _tiny_default("top_k")),
]
TopPOpt = Annotated[
    float | None,
    typer.Option(help="Nucleus sampling mass in (0, 1] (1 = off; sampling only)." + _tiny_default("top_p")),
]
SeedOpt = Annotated[int | None, typer.Option(help="Seed for reproducible sampling (sampling only).")]
StopOpt = Annotated[list[str] | None, typer.Option(help="Stop after this string (repeatable).")]
DeviceOpt = Annotated[
    str,
    typer.Option(
        help="auto, cpu, cuda or cuda:N. auto with several GPUs spreads the target over as few as fit."
    ),
]
DtypeOpt = Annotated[str | None, typer.Option(help="auto, float32, float16 or bfloat16.")]
QuantOpt = Annotated[str | None, typer.Option(help="Quantize the target: none, 8bit or 4bit.")]
ChatOpt = Annotated[
    bool | None,
    typer.Option("--chat/--no-chat", help="Apply the chat template (default: when the tokenizer has one)."),
]
AllowPickleOpt = Annotated[bool, typer.Option("--allow-pickle", help="Allow loading pickle (.bin) weights.")]
TrustOpt = Annotated[
    bool, typer.Option("--trust-remote-code", help="Run model code shipped with the checkpoint.")
]
NoColorOpt = Annotated[bool, typer.Option("--no-color", help="No colours (styles stay); NO_COLOR works too.")]
SaveOpt = Annotated[
    str | None, typer.Option(help="Also write what the view showed to FILE (.svg or .html).", metavar="FILE")
]
ThreadsOpt = Annotated[
    str,
    typer.Option(
        help="CPU threads for torch: a number, or auto (one per core that other processes left free while "
        "the models loaded: spinning threads on a busy machine collapse).",
        metavar="N|auto",
    ),
]
CompileOpt = Annotated[
    bool,
    typer.Option(
        "--compile",
        help="Static KV caches and torch.compile'd forwards (CUDA graphs on CUDA): faster steps once warm; "
        "each new forward shape compiles on first use (seconds). Strategies none, draft, lookup, eagle.",
    ),
]
LeanOpt = Annotated[
    bool,
    typer.Option(
        "--lean/--no-lean",
        help="Run the drafter's steps through specli's own forward (Llama / Mistral / Qwen draft models, "
        "EAGLE heads): the same drafts at a fraction of the per-step overhead. --no-lean uses the model's "
        "own forward.",
    ),
]
VIEWS = ("live", "plain", "none")


def check_save(save: str | None) -> None:
    """Before anything loads: a format we can write, into a folder that exists."""
    if save is None:
        return
    if not save.lower().endswith((".svg", ".html", ".htm")):
        raise UsageError(
            f"cannot tell the format of '{save}'.", "Give --save a file ending in .svg or .html."
        )
    folder = Path(save).expanduser().parent
    if not folder.is_dir():
        raise UsageError(
            f"cannot save to '{save}': the folder '{folder}' does not exist.",
            "Create it first, or give --save a path in an existing folder.",
        )
    if not os.access(folder, os.W_OK):
        raise UsageError(f"cannot save to '{save}': the folder '{folder}' is not writable.")


@dataclass(frozen=True)
class ModelOptions:
    """Which models, and where and how to load them (what `specli.load` takes)."""

    preset: str | None = None
    target: str | None = None
    draft: str | None = None
    strategy: str | None = None
    also: tuple[str, ...] = ()  # more strategies to load for (bench): their models load too
    device: str = "auto"
    dtype: str | None = None
    quant: str | None = None
    allow_pickle: bool = False
    trust_remote_code: bool = False
    threads: int | str | None = AUTO
    compile: bool = False
    lean: bool = True


@dataclass(frozen=True)
class GenerationOptions:
    """Settings given on the command line; None leaves the preset's."""

    max_new_tokens: int | None = None
    num_draft_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] | None = None
    chat: bool | None = None
    exit_layer: int | None = None
    ngram_min: int | None = None
    ngram_max: int | None = None
    fixed_k: bool | None = None
    draft_p_min: float | None = None

    def overrides(self) -> dict[str, Any]:
        """As keyword arguments for `resolve_settings` / `Pair.settings`."""
        return dataclasses.asdict(self)

    def check_text(self) -> None:
        """Stop strings given as arguments must be UTF-8 (argv's undecodable bytes arrive as surrogates)."""
        for stop in self.stop or ():
            check_text(stop, "--stop")
