"""Options shared by the commands, defined once: the `Annotated` aliases each command's signature uses,
and the groups they are gathered into (`ModelOptions`: which models and how to load them;
`GenerationOptions`: the settings named, a `SettingsChange`: None leaves the preset's)."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from specli.cli.prompt_input import check_text
from specli.errors import SpecliError, UsageError
from specli.models import sources
from specli.models.engines import check_engine
from specli.models.model_dirs import config_max_positions
from specli.presets import DEFAULT_PRESET, MAX_TREE_NODES, MAX_TREE_WIDTH, Preset, resolve_preset
from specli.settings import (
    ModelContext,
    Settings,
    SettingsChange,
    check_fits,
    check_strategy,
    resolve_settings,
)
from specli.strategies import (
    LOOKUP_DRAFT_TOKENS,
    LOOKUP_DRAFT_TOKENS_LLAMA,
    LOOKUP_NGRAM_MAX,
    Model,
    Strategy,
    described,
    either,
    entry,
    tree_strategies,
)
from specli.threads import AUTO, parse_threads

PromptArg = Annotated[
    str | None,
    typer.Argument(
        help="The prompt text; '-' reads it from stdin (or give --prompt-file).",
        metavar="PROMPT",
        show_default=False,
    ),
]
PromptFileOpt = Annotated[
    str | None,
    typer.Option(
        "--prompt-file",
        help="Read the prompt from FILE instead of PROMPT (UTF-8; one trailing newline dropped, as on "
        "stdin; '-': stdin).",
        metavar="FILE",
    ),
]
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
        return resolve_settings(resolve_preset(DEFAULT_PRESET))
    except SpecliError:
        return None


PresetOpt = Annotated[
    str | None,
    typer.Option(help="Preset name or YAML path (see `specli presets list`); default: tiny (embedded)."),
]
TargetOpt = Annotated[
    str | None,
    typer.Option(
        help="Target model: a folder, hub id, .gguf file, org/name:FILE.gguf, ollama:NAME[:TAG] or "
        "embedded:NAME."
    ),
]
DraftOpt = Annotated[
    str | None,
    typer.Option(
        help="Drafter model sharing the target's tokenizer (any form --target takes); with --strategy "
        "eagle, the EAGLE head (a folder, hub id or embedded:tiny-eagle3)."
    ),
]
StrategyOpt = Annotated[
    str | None,
    typer.Option(help=f"{described()}. Default: the preset's."),
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
NgramMinOpt = Annotated[
    int | None, typer.Option(help="lookup: shortest suffix to match, in tokens (default 1).")
]
NgramMaxOpt = Annotated[
    int | None,
    typer.Option(
        help=f"lookup: longest suffix to match, in tokens (default {LOOKUP_NGRAM_MAX}): a long match "
        "pins the passage a draft copies; 3 re-decides each token from a 3-gram."
    ),
]
DraftTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--num-draft-tokens",
        "-k",
        help="The most tokens a round drafts (k); each round chooses its own up to it unless --fixed-k."
        + _tiny_default("num_draft_tokens")
        + f" lookup: {LOOKUP_DRAFT_TOKENS} on the torch engine, {LOOKUP_DRAFT_TOKENS_LLAMA} on llama.cpp, "
        "unless -k or a lookup preset sets it.",
    ),
]
TreeOpt = Annotated[
    int | None,
    typer.Option(
        "--tree",
        help="Draft a token tree of up to N nodes a round instead of a chain (several candidates per "
        f"position, all verified in one target forward), N from 1 to {MAX_TREE_NODES}; 0 drafts a chain. "
        f"Strategies {either(tree_strategies())} (none ignores it). E.g. --tree 16 --tree-width 2."
        + _tiny_default("tree"),
        metavar="N",
    ),
]
TreeWidthOpt = Annotated[
    int | None,
    typer.Option(
        "--tree-width",
        help=f"With --tree: nodes expanded per depth, and children per node (1 to {MAX_TREE_WIDTH})."
        + _tiny_default("tree_width"),
        metavar="W",
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
EngineOpt = Annotated[
    str | None,
    typer.Option(
        help="What evaluates the models: auto (llama.cpp for a GGUF target when llama-cpp-python is "
        "installed and the strategy runs on it, else torch), torch (transformers; every strategy) or "
        "llama.cpp (the GGUF in its own quantization; strategies none, lookup, draft and heads). "
        "Default: the preset's, else auto.",
        metavar="auto|torch|llama.cpp",
    ),
]
CompileOpt = Annotated[
    bool,
    typer.Option(
        "--compile",
        help="Static KV caches and torch.compile'd forwards (CUDA graphs on CUDA): faster steps once warm. "
        "Every graph the generation uses is built before its first round, timed apart (embedded pair, 2 "
        "busy CPU cores: about 2 minutes cold, 10-40 s once torch's disk cache holds them). Strategies none, "
        "draft, lookup, eagle.",
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
    engine: str | None = None  # None: the preset's, else auto


GenerationOptions = SettingsChange  # the settings given on the command line; None leaves the preset's


def check_stop_text(options: SettingsChange) -> None:
    """Stop strings given as arguments must be UTF-8 (argv's undecodable bytes arrive as surrogates)."""
    stops = (options.stop,) if isinstance(options.stop, str) else options.stop or ()
    for stop in stops:
        check_text(stop, "--stop")


# --------------------------------------------------------------------------- checks before torch loads

DEVICE_FORM = re.compile(r"auto|cpu|cuda(:\d+)?")
DTYPE_NAMES = ("auto", "float32", "fp32", "float16", "fp16", "half", "bfloat16", "bf16")  # loading.DTYPES
QUANT_NAMES = ("none", "8bit", "4bit")  # loading.QUANT_MODES


def check_before_loading(models: ModelOptions, options: GenerationOptions | None = None) -> Settings:
    """Every check of the common model options that needs no model, run before torch or transformers is
    imported (importing them takes 5-9 s): a usage error comes at once. Any command that loads a model
    calls it first (`load_pair` does); it imports neither torch nor transformers.

    Checks, each a UsageError (exit 2) in one or two lines: the strategy (and `also`; a typo gets "Did you
    mean"), the form of --device (whether CUDA exists needs torch: loading says), --dtype, --quant,
    --threads, the stop strings' encoding, the preset and every setting's range (`resolve_settings`;
    for every strategy named: a tree with one that drafts chains only), a
    local model folder or embedded:NAME that does not exist, and -k against the context a local model's
    config.json declares (the target's, and the drafter's for strategy draft). Hub ids are not looked
    up: loading checks them. Returns the settings resolved from the preset and `options` (before the
    loaded model completes them: `Pair.settings`)."""
    options = options or GenerationOptions()
    for strategy in (models.strategy, *models.also):
        if strategy is not None:
            check_strategy(strategy)
    check_device_dtype_quant(models.device, models.dtype, models.quant)
    parse_threads(models.threads)
    if models.engine is not None:
        check_engine(models.engine)
    check_stop_text(options)
    preset = _preset(models)
    named = check_engine(models.engine or (preset.engine if preset else "auto"))
    engine = None if named == "auto" else named  # auto: known once loaded (a strategy's own k may differ)
    settings = resolve_settings(preset, options, strategy=models.strategy, engine=engine)
    strategies = _strategies(models, preset)
    target = models.target or (preset.target.model if preset else None)
    preset_draft = preset.draft.model if preset and preset.draft else None
    needs = {entry(strategy).model for strategy in strategies}
    head = models.draft if any(m is not None and m.is_head for m in needs) else None  # --draft names a head
    drafter = preset_draft if head else models.draft or preset_draft
    for name, used in ((target, True), (head, True), (drafter, Model.DRAFT in needs)):
        if name is not None and used:
            local_model_folder(name)
    for strategy in strategies:  # each strategy's own settings: its k, and a tree only where it drafts one
        own = resolve_settings(preset, options, strategy=strategy, engine=engine)
        defaulted = options.num_draft_tokens is None and own.num_draft_tokens == entry(strategy).own_k(engine)
        if defaulted:  # a strategy's own k: the loaded pair cuts it to the context (`Pair.settings`)
            continue
        if options.num_draft_tokens is not None or models.draft is None:  # else a parallel drafter picks k
            uses_drafter = entry(strategy).model == Model.DRAFT  # lookup never reads the preset's drafter
            check_fits(own, _context(target), _context(drafter) if uses_drafter else None)
    return settings


def check_device_dtype_quant(device: str, dtype: str | None, quant: str | None) -> None:
    """The spelling of --device, --dtype and --quant (what they mean on this machine needs torch)."""
    if not DEVICE_FORM.fullmatch(device.strip().lower()):
        raise UsageError(f"unknown device '{device}'.", "Use one of: auto, cpu, cuda, cuda:N.")
    if dtype is not None and dtype.strip().lower() not in DTYPE_NAMES:
        raise UsageError(f"unknown dtype '{dtype}'.", "Use one of: auto, float32, float16, bfloat16.")
    if quant is not None and quant not in QUANT_NAMES:
        raise UsageError(f"unknown quantization '{quant}'.", f"Use one of: {', '.join(QUANT_NAMES)}.")


def local_model_folder(name: str) -> Path | None:
    """The folder a model name points to on this machine (embedded:NAME or an existing folder), None for
    a hub id or a GGUF; ModelNotFoundError / UsageError for what `sources.classify` refuses (an unknown
    embedded or Ollama name, a path that is nothing, a file that is no model) and for a GGUF here that
    is damaged, cut short or one part of a split model (its header is read: milliseconds)."""
    source = sources.classify(name)
    if source.is_gguf:
        sources.local_config(source)  # reads the header, which says what is wrong with the file
    return source.path if source.kind in ("embedded", "folder") else None


def local_model_config(name: str) -> dict[str, Any] | None:
    """What this machine knows of a model's config without torch: a folder's config.json, a local
    GGUF's header (`sources.local_config`); None for a hub id."""
    return sources.local_config(sources.classify(name))


def _preset(models: ModelOptions) -> Preset | None:
    """The preset `specli.load` will use (api.preset_for): the named one, else tiny without a target."""
    name = models.preset if models.preset is not None or models.target is not None else DEFAULT_PRESET
    return resolve_preset(name) if name else None


def _strategies(models: ModelOptions, preset: Preset | None) -> list[str]:
    """The strategies the pair will run (api._sources): those named, else the preset's, else draft when a
    drafter is named and plain decoding when not."""
    named = [s for s in (models.strategy, *models.also) if s]
    if named:
        return named
    if preset is not None:
        return [preset.strategy]
    return [Strategy.DRAFT if models.draft else Strategy.NONE]


def _context(name: str | None) -> ModelContext | None:
    """What a local config says of a model's context (`check_fits`' input); None for no model, and an
    unknown context for a hub id (loading checks those)."""
    if name is None:
        return None
    config = local_model_config(name)
    return ModelContext(name, config_max_positions(config) if config is not None else None)
