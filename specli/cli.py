"""The `specli` command line. Thin: parse, resolve, call the API, hand rounds to a renderer.

Each command gathers its options into groups (`ModelOptions`: which models and how to load them;
`GenerationOptions`: setting overrides), resolves the preset and the settings before anything loads
(so a typo fails at once), loads the pair, and reads every setting from the `Settings` it gets back.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specli import __version__
from specli.errors import SpecliError, UsageError
from specli.events import Stats
from specli.memory import PLAN_CONTEXT, human, preset_estimate
from specli.presets import available_presets, load_preset_file, preset_to_dict, resolve_preset
from specli.prompt_input import StepKeys, check_text, read_prompt
from specli.render.bench import bench_view
from specli.render.explain import ExplainView
from specli.render.live import LiveView, TokenView
from specli.render.plain import PlainWriter, summary_line
from specli.render.progress import Counted, loading_progress
from specli.settings import Settings, check_strategy, resolve_settings
from specli.threads import AUTO, parse_threads

if TYPE_CHECKING:
    from specli.api import Pair

# torch and transformers load only inside the commands that run a model (specli.api, specli.bench and
# transformers' logging are imported there), never at import: `specli --version`, `--help` and
# `presets list` stay fast. tests/test_settings.py fails if one of them imports torch.

app = typer.Typer(
    name="specli",
    help="Local speculative generation you can see: exact output, faster, every draft shown.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
presets_app = typer.Typer(
    help="List and inspect presets (target/drafter pairs with settings).", no_args_is_help=True
)
app.add_typer(presets_app, name="presets")

DebugOpt = Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]


def _stderr(no_color: bool = False) -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True, no_color=no_color or None)


@contextmanager
def _user_errors(debug: bool) -> Iterator[None]:
    """Turn failures into one or two lines on stderr and an exit code (2 usage, 1 runtime)."""
    debug = debug or os.environ.get("SPECLI_DEBUG") == "1"
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:  # Ctrl-C while starting up (imports, loading) or outside a generation loop
        if debug:
            raise
        _stderr().print("interrupted.", markup=False)
        raise typer.Exit(130) from None
    except SpecliError as e:
        if debug:
            raise
        _stderr().print(f"[bold red]error:[/] {escape(e.message)}", markup=True, highlight=False)
        if e.hint:
            _stderr().print(e.hint, markup=False)
        raise typer.Exit(e.exit_code) from None
    except Exception as e:  # a bug or an environment failure: say what, point to --debug
        if debug:
            raise
        _stderr().print(
            f"[bold red]error:[/] {type(e).__name__}: {escape(str(e))}", markup=True, highlight=False
        )
        _stderr().print("Run again with --debug for the full traceback.", markup=False)
        raise typer.Exit(1) from None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"specli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """specli: speculative decoding on your own machine."""


def _quiet_transformers() -> None:
    """Our own status line replaces transformers' per-file progress bars and advisory warnings."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


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
        + _tiny_default("num_draft_tokens"),
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
VIEWS = ("live", "plain", "none")


def _check_save(save: str | None) -> None:
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


def _greedy_note(options: GenerationOptions, settings: Settings) -> None:
    """One line when sampling options were given but decoding is greedy (they would do nothing)."""
    given = [name for name in ("top_k", "top_p", "seed") if getattr(options, name) is not None]
    if settings.greedy and given:
        names = ", ".join("--" + name.replace("_", "-") for name in given)
        _stderr().print(
            f"note: {names} {'affects' if len(given) == 1 else 'affect'} sampling only; decoding is greedy "
            "(temperature 0). "
            "Add --temperature T (> 0) to sample.",
            markup=False,
        )


def _load(
    models: ModelOptions,
    options: GenerationOptions,
    note_greedy: bool = True,
    no_color: bool = False,
    announce: str | None = None,
) -> tuple[Pair, Settings]:
    """Resolve the preset and the settings first (a typo fails before any model loads), load with a
    spinner, then the settings again as the loaded pair completes them (exit layer, drafter)."""
    threads = parse_threads(models.threads)
    options.check_text()
    from specli.api import check_model_options, load, preset_for

    strategies = [s for s in (models.strategy, *models.also) if s]
    preset = preset_for(models.preset, target=models.target, draft=models.draft, strategy=strategies or None)
    resolved = resolve_settings(preset, strategy=models.strategy, **options.overrides())
    if note_greedy:
        _greedy_note(options, resolved)
    check_model_options(device=models.device, dtype=models.dtype, quant=models.quant)
    _quiet_transformers()
    with loading_progress(_stderr(no_color), announce=announce) as download_bars:
        pair = load(
            preset,
            target=models.target,
            draft=models.draft,
            strategy=(models.strategy, *models.also) if models.also else models.strategy,
            device=models.device,
            dtype=models.dtype,
            quant=models.quant,
            allow_pickle=models.allow_pickle,
            trust_remote_code=models.trust_remote_code,
            download_bars=download_bars,
            threads=threads,
            compile=models.compile,
        )
    if models.compile and pair.target.device.type != "cuda":
        _stderr().print(
            "note: --compile without CUDA has no CUDA graphs: it compiles (slow first calls), rarely faster.",
            markup=False,
        )
    if pair.placement is not None:
        _stderr().print(f"note: {pair.placement.describe()}", markup=False)
    if getattr(pair.target_model, "is_quantized", False) and pair.target.device.type == "cpu":
        _stderr().print(
            "note: bitsandbytes quantization on CPU works but is slow: it saves memory, not time.",
            markup=False,
        )
    return pair, pair.settings(**options.overrides())


def _prepare(
    prompt: str, models: ModelOptions, options: GenerationOptions, record_top: int = 0, no_color: bool = False
) -> tuple[Pair, Settings, list[int], str, Iterator[Any]]:
    """Read the prompt, load the pair and its settings, say once what the run will not show (notes),
    start the rounds."""
    text = read_prompt(prompt)
    pair, settings = _load(models, options, no_color=no_color)
    ids = pair.prompt_ids(text, chat=settings.chat)
    from specli.notes import generation_notes  # imports torch: only once a command runs a model

    for note in generation_notes(pair, settings, len(ids), models.strategy):
        _stderr().print(f"note: {note}", markup=False)
    return pair, settings, ids, text, pair.stream(prompt_ids=ids, settings=settings, record_top=record_top)


def _save_view(renderable: Any, path: str, width: int, title: str) -> None:
    """Render into a recording console and write SVG or HTML (by extension)."""
    console = Console(
        record=True, file=io.StringIO(), width=width, force_terminal=True, color_system="truecolor"
    )
    console.print(renderable)
    if path.lower().endswith(".svg"):
        console.save_svg(path, title=title)
    else:
        console.save_html(path)


@app.command(
    epilog="Examples:\n\n"
    "  specli generate 'def fibonacci(n):'            # the embedded tiny pair, offline\n\n"
    "  specli generate 'def fibonacci(n):' --strategy self --exit-layer 3\n\n"
    "  specli generate 'def fibonacci(n):' --target ./target --draft ./drafter\n\n"
    "  specli generate 'Explain KV caches' --preset llama-8b-1b --max-new-tokens 200\n\n"
    "  echo 'Once upon a time' | specli generate - --preset qwen2.5-7b-0.5b \\\n"
    "      --temperature 0.7 --seed 1 --json",
)
def generate(
    prompt: Annotated[str, typer.Argument(help="The prompt text; '-' reads it from stdin.")],
    preset: PresetOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    strategy: StrategyOpt = None,
    exit_layer: ExitLayerOpt = None,
    ngram_min: NgramMinOpt = None,
    ngram_max: NgramMaxOpt = None,
    fixed_k: FixedKOpt = False,
    draft_p_min: DraftPMinOpt = None,
    num_draft_tokens: DraftTokensOpt = None,
    max_new_tokens: MaxNewOpt = None,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    seed: SeedOpt = None,
    stop: StopOpt = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = None,
    quant: QuantOpt = None,
    chat: ChatOpt = None,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustOpt = False,
    view: Annotated[
        str | None,
        typer.Option(
            help="live (coloured tokens, the default in a terminal), plain (streamed text; the default "
            "when piped) or none (the text at the end)."
        ),
    ] = None,
    no_color: NoColorOpt = False,
    save: SaveOpt = None,
    as_json: JsonOpt = False,
    threads: ThreadsOpt = AUTO,
    compile: CompileOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Generate text with speculative decoding; output is exactly the target's own."""
    models = ModelOptions(
        preset=preset, target=target, draft=draft, strategy=strategy, device=device, dtype=dtype,
        quant=quant, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, threads=threads,
        compile=compile,
    )  # fmt: skip
    options = GenerationOptions(
        max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens, temperature=temperature,
        top_k=top_k, top_p=top_p, seed=seed, stop=stop, chat=chat, exit_layer=exit_layer,
        ngram_min=ngram_min, ngram_max=ngram_max, fixed_k=fixed_k or None,
        draft_p_min=draft_p_min,
    )  # fmt: skip
    with _user_errors(debug):
        if view is not None and view not in VIEWS:
            raise UsageError(f"unknown view '{view}'.", f"Use one of: {', '.join(VIEWS)}.")
        _check_save(save)
        pair, settings, ids, text, rounds = _prepare(prompt, models, options, no_color=no_color)
        from specli.api import Result

        k = settings.num_draft_tokens
        stdout = Console(highlight=False, no_color=no_color or None, soft_wrap=True)
        mode = "json" if as_json else view or ("live" if stdout.is_terminal else "plain")
        token_view = TokenView(pair.tokenizer, settings.strategy, k, prompt=text)
        live = LiveView(token_view, stdout) if mode == "live" else None
        writer = PlainWriter(sys.stdout) if mode == "plain" else None
        collected: list[Any] = []
        interrupted = False
        with live if live is not None else nullcontext():
            try:
                for r in rounds:
                    collected.append(r)
                    if live is not None:
                        live.round(r)
                    elif writer is not None:
                        writer.round(r)
            except KeyboardInterrupt:
                interrupted = token_view.interrupted = True  # the final frame says so
        stats = Stats()
        for r in collected:
            stats.observe(r)
        tokens = [t for r in collected for t in r.committed]
        if mode == "json":
            result = Result(pair.decode(tokens), tokens, ids, stats, collected).to_dict()
            result["stats"].update(
                strategy=settings.strategy,
                num_draft_tokens=k,
                fixed_k=settings.fixed_k,
                draft_p_min=settings.draft_p_min,
                mean_k=stats.drafted / stats.rounds if stats.rounds else 0.0,
                interrupted=interrupted,
            )
            from specli.notes import generation_notes

            result["stats"]["notes"] = generation_notes(pair, settings, len(ids), models.strategy)
            if interrupted:
                result["stats"]["stop_reason"] = "interrupted"
            typer.echo(json.dumps(result, ensure_ascii=False))
        elif mode != "live":
            if writer is None:  # --view none: the text at the end
                sys.stdout.write(pair.decode(tokens))
            sys.stdout.write("\n")
            sys.stdout.flush()
        if interrupted and mode != "json":
            _stderr().print("interrupted: showing what was generated so far", markup=False)
        if mode in ("plain", "none"):
            _stderr().print(summary_line(stats, settings.strategy, k, settings.exit_layer), markup=False)
        if save:
            if live is None:  # the live view built it as it went; otherwise replay the rounds
                for r in collected:
                    token_view.add(r)
                token_view.finish()
            _save_view(token_view.renderable(), save, max(stdout.width, 80), "specli generate")
        if interrupted:
            raise typer.Exit(130)


@contextmanager
def _step_keys(step: bool, prompt_on_stdin: bool) -> Iterator[StepKeys | None]:
    """With --step, the terminal's keys between rounds (refused at once without a terminal)."""
    if not step:
        yield None
        return
    keys = StepKeys(prompt_on_stdin)
    try:
        yield keys
    finally:
        keys.close()


@app.command(
    epilog="Examples:\n\n"
    "  specli explain 'def fibonacci(n):' --temperature 0.8 --seed 1\n\n"
    "  specli explain 'def fibonacci(n):' --rounds 5 --step            # Enter between rounds\n\n"
    "  specli explain 'for i in range(10):' --strategy lookup --pace 0 --save rounds.svg",
)
def explain(
    prompt: Annotated[str, typer.Argument(help="The prompt text; '-' reads it from stdin.")],
    preset: PresetOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    strategy: StrategyOpt = None,
    exit_layer: ExitLayerOpt = None,
    ngram_min: NgramMinOpt = None,
    ngram_max: NgramMaxOpt = None,
    fixed_k: FixedKOpt = False,
    draft_p_min: DraftPMinOpt = None,
    num_draft_tokens: DraftTokensOpt = None,
    max_new_tokens: MaxNewOpt = None,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    seed: SeedOpt = None,
    stop: StopOpt = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = None,
    quant: QuantOpt = None,
    chat: ChatOpt = None,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustOpt = False,
    rounds_limit: Annotated[
        int | None, typer.Option("--rounds", help="Stop after this many rounds.", min=1)
    ] = None,
    pace: Annotated[float, typer.Option(help="Seconds to pause between rounds (0 for none).", min=0)] = 1.0,
    step: Annotated[
        bool,
        typer.Option(
            "--step",
            help="Wait for a key between rounds (Enter: the next round, q: stop), read from the terminal.",
        ),
    ] = False,
    top: Annotated[int, typer.Option(help="Entries of a distribution to show.", min=1)] = 5,
    no_color: NoColorOpt = False,
    save: SaveOpt = None,
    threads: ThreadsOpt = AUTO,
    compile: CompileOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Walk through speculative decoding round by round: each draft, its check, the correction or bonus."""
    models = ModelOptions(
        preset=preset, target=target, draft=draft, strategy=strategy, device=device, dtype=dtype,
        quant=quant, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, threads=threads,
        compile=compile,
    )  # fmt: skip
    options = GenerationOptions(
        max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens, temperature=temperature,
        top_k=top_k, top_p=top_p, seed=seed, stop=stop, chat=chat, exit_layer=exit_layer,
        ngram_min=ngram_min, ngram_max=ngram_max, fixed_k=fixed_k or None,
        draft_p_min=draft_p_min,
    )  # fmt: skip
    with _user_errors(debug), _step_keys(step, prompt_on_stdin=prompt == "-") as keys:
        _check_save(save)
        pair, settings, ids, text, rounds = _prepare(
            prompt, models, options, record_top=top, no_color=no_color
        )
        out = Console(highlight=False, no_color=no_color or None)
        explained = ExplainView(
            pair.tokenizer,
            settings.strategy,
            settings.num_draft_tokens,
            greedy=settings.greedy,
            top=top,
            prompt_ids=ids,
        )
        shown: list[Any] = []
        out.print(Text.assemble(("prompt: ", "bold"), text))
        interrupted = False
        try:
            for r in rounds:
                panel = explained.panel(r)
                shown.append(panel)
                out.print(panel)
                if rounds_limit is not None and r.index + 1 >= rounds_limit:
                    break
                if r.stop is None:
                    if keys is not None:
                        if not keys.next_round():
                            break
                    elif pace > 0 and out.is_terminal:  # piped: nobody watches the pace
                        time.sleep(pace)
        except (KeyboardInterrupt, EOFError) as e:
            interrupted = isinstance(e, KeyboardInterrupt)
        summary = explained.summary()
        shown.append(summary)
        out.print(summary)
        if save:
            _save_view(Group(*shown), save, max(out.width, 100), "specli explain")
        if interrupted:
            raise typer.Exit(130)


@app.command(
    epilog="Examples:\n\n"
    "  specli bench                                    # the embedded pair on its code prompt set\n\n"
    "  specli bench --strategy draft --strategy lookup --strategy self --category editing\n\n"
    "  specli bench --preset llama-70b-1b --set chat --limit 10 --compare-hf --json run.json\n\n"
    "  specli bench --preset qwen2.5-7b-0.5b --prompts question.jsonl    # Spec-Bench format",
)
def bench(
    preset: PresetOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    strategy: Annotated[
        list[str] | None,
        typer.Option(
            help="Strategy to measure (repeatable; default: the preset's). Plain decoding always runs."
        ),
    ] = None,
    prompts: Annotated[
        str | None,
        typer.Option(help="Prompts: Spec-Bench question.jsonl, JSONL with 'prompt', or text lines."),
    ] = None,
    prompt_set: Annotated[
        str | None, typer.Option("--set", help="A packaged prompt set: code or chat (default: by the model).")
    ] = None,
    category: Annotated[list[str] | None, typer.Option(help="Only this category (repeatable).")] = None,
    limit: Annotated[int | None, typer.Option(help="At most N prompts per category.", min=1)] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Tokens generated per prompt.", min=1)] = 128,
    num_draft_tokens: DraftTokensOpt = None,
    sweep_k: Annotated[
        str | None,
        typer.Option(
            "--sweep-k",
            help="Run every strategy at each k: a range '2-8' or a list '2,4,8'. Adds a table per strategy: "
            "tok/s, draft ms per round against k (what parallel drafting buys) and α by draft position.",
        ),
    ] = None,
    temperature: Annotated[float, typer.Option(help="0 = greedy (outputs are checked for identity).")] = 0.0,
    seed: Annotated[int, typer.Option(help="Seed for sampling runs.")] = 0,
    repeats: Annotated[int, typer.Option(help="Runs per prompt and strategy (median).", min=1)] = 1,
    warmup: Annotated[int, typer.Option(help="Uncounted warm-up runs per strategy.", min=0)] = 1,
    exit_layer: ExitLayerOpt = None,
    ngram_min: NgramMinOpt = None,
    ngram_max: NgramMaxOpt = None,
    fixed_k: FixedKOpt = False,
    draft_p_min: DraftPMinOpt = None,
    compare_hf: Annotated[
        bool, typer.Option("--compare-hf", help="Also time transformers' own (assisted) generate().")
    ] = False,
    json_file: Annotated[
        str | None, typer.Option("--json", help="Write every measurement and the environment to FILE.")
    ] = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = None,
    quant: QuantOpt = None,
    chat: ChatOpt = None,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustOpt = False,
    threads: ThreadsOpt = AUTO,
    compile: CompileOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Measure strategies against plain decoding (and transformers) on prompt sets, per category."""
    from specli import bench as b

    options = GenerationOptions(
        max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens, temperature=temperature,
        seed=seed, chat=chat, exit_layer=exit_layer, ngram_min=ngram_min, ngram_max=ngram_max,
        fixed_k=fixed_k or None, draft_p_min=draft_p_min,
    )  # fmt: skip
    with _user_errors(debug):
        strategies = list(dict.fromkeys(check_strategy(s) for s in strategy or []))
        ks = parse_sweep(sweep_k) if sweep_k is not None else ()
        if ks and num_draft_tokens is not None:
            raise UsageError("give --sweep-k or --num-draft-tokens, not both.")
        if prompts and prompt_set:
            raise UsageError("give --prompts or --set, not both.")
        source = Path(prompts) if prompts else (b.set_path(prompt_set) if prompt_set else None)
        loaded = b.read_prompts(source) if source else None
        models = ModelOptions(
            preset=preset, target=target, draft=draft,
            strategy=strategies[0] if strategies else None, also=tuple(strategies[1:]),
            device=device, dtype=dtype, quant=quant, allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code, threads=threads, compile=compile,
        )  # fmt: skip
        pair, settings = _load(models, options, note_greedy=False, announce="bench")
        strategies = strategies or [pair.strategy]
        for other in strategies:  # each strategy's settings are valid for this pair, before any run
            pair.settings(**options.overrides(), strategy=other)
        if loaded is None:
            loaded = b.read_prompts(b.set_path("chat" if pair.uses_chat(settings.chat) else "code"))
        selected = b.select_prompts(loaded, category or [], limit)
        bench_settings = b.BenchSettings(settings=settings, repeats=repeats, warmup=warmup, ks=ks)
        err = _stderr()
        encoded, skipped = b.encode_prompts(pair, selected, settings.chat)
        for note in skipped:
            err.print(f"warning: {note}", markup=False)
        with Counted(err, "bench") as counted:  # every stage: its count and the time it has left
            modes = b.transformers_modes(pair, strategies, settings) if compare_hf else None
            measurements = b.run_bench(
                pair, encoded, strategies, bench_settings, progress=counted, hf_modes=modes
            )  # transformers' runs interleaved with specli's: machine drift hits both alike
            hf = None
        env = b.environment(pair, dtype, quant)
        env["peak_memory_bytes"] = b.peak_memory_bytes(pair.target.device)
        env["threads_option"] = threads  # env["threads"]: the count torch used
        env["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
        result = b.report(measurements, bench_settings, env, hf, skipped)
        out = Console(highlight=False)
        if not out.is_terminal:
            out = Console(highlight=False, width=150)
        out.print(bench_view(result))
        if json_file:
            Path(json_file).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        if result["errors"]:
            raise typer.Exit(1)


def parse_sweep(text: str) -> tuple[int, ...]:
    """'2-8' -> (2, 3, ..., 8); '2,4,8' -> (2, 4, 8); each k >= 1. UsageError otherwise."""
    fix = "Give a range like 2-8 or a list like 2,4,8 (k >= 1)."
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-"))
            ks = tuple(range(low, high + 1))
        else:
            ks = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--sweep-k '{text}' is not a range or a list of numbers.", fix) from None
    if not ks or min(ks) < 1:
        raise UsageError(f"--sweep-k '{text}' names no k >= 1.", fix)
    return tuple(sorted(set(ks)))


def _preset_row(name: str, path: Any) -> list[str]:

    try:
        p = load_preset_file(path)
    except SpecliError as e:
        return [name, "[red]invalid[/]", escape(str(e).splitlines()[0]), "", "", ""]

    return [
        name,
        p.strategy,
        p.target.model,
        _drafter_label(p),
        p.target.quantization,
        human(preset_estimate(p)),
    ]


def _drafter_label(p: Any) -> str:
    if p.strategy == "lookup":
        return f"n-grams {p.speculation.ngram_max}..{p.speculation.ngram_min}"
    if p.strategy == "self":
        return f"exit layer {p.speculation.exit_layer}" if p.speculation.exit_layer else "early exit"
    return p.draft.model if p.draft else ""


def _preset_json(preset: Any) -> dict[str, Any]:
    """preset_to_dict plus the memory estimate (bytes, or None when a model's architecture is unknown)."""

    data = preset_to_dict(preset)
    data["estimated_memory_bytes"] = preset_estimate(preset, PLAN_CONTEXT)
    data["estimated_memory_context"] = PLAN_CONTEXT
    return data


def _memory_line(preset: Any) -> str:

    total = preset_estimate(preset, PLAN_CONTEXT)
    if total is None:
        return "estimated memory: unknown until the model's config is available (local folder or cache)"
    return f"estimated memory: {human(total)} (weights, KV cache for {PLAN_CONTEXT} tokens, 10% workspace)"


@presets_app.command("list")
def presets_list(as_json: JsonOpt = False, debug: DebugOpt = False) -> None:
    """List the presets: built-in ones and yours ($SPECLI_PRESETS, ~/.config/specli/presets)."""

    with _user_errors(debug):
        found = available_presets()
        if as_json:
            out = []
            for name, path in found.items():
                try:
                    out.append(_preset_json(load_preset_file(path)))
                except SpecliError as e:
                    out.append({"name": name, "source": str(path), "error": str(e)})
            typer.echo(json.dumps(out, indent=2))
            return
        table = Table("name", "strategy", "target", "drafter", "quant", "memory", title="specli presets")
        for column in table.columns:
            column.overflow = "fold"
        table.columns[0].no_wrap = True
        for name, path in found.items():
            table.add_row(*_preset_row(name, path))
        out = Console()
        (out if out.is_terminal else Console(width=150)).print(table)


@presets_app.command("show")
def presets_show(
    name: Annotated[str, typer.Argument(help="Preset name or YAML path.")],
    as_json: JsonOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Show one preset in full."""

    with _user_errors(debug):
        preset = resolve_preset(name)
        data = _preset_json(preset)
        if as_json:
            typer.echo(json.dumps(data, indent=2))
        else:
            data = preset_to_dict(preset)
            typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())
            typer.echo(f"# {_memory_line(preset)}")


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
