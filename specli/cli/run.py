"""Loading a pair for a command and starting its rounds: resolve the preset and the settings before
anything loads (so a typo fails at once), load with a spinner, say once what the run will not show."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console

from specli.cli.common import ctrl_c_ends_loading, quiet_transformers, stderr_console
from specli.cli.options import GenerationOptions, ModelOptions, check_before_loading
from specli.render.progress import loading_progress
from specli.settings import Settings
from specli.strategies import entry
from specli.threads import parse_threads
from specli.wording import count

if TYPE_CHECKING:
    from specli.pair import Pair

# torch and transformers load only inside the commands that run a model (specli.api, specli.bench.run and
# transformers' logging are imported there), never at import: `specli --version`, `--help` and
# `presets list` stay fast. tests/cli/test_settings.py fails if one of them imports torch.


def greedy_note(options: GenerationOptions, settings: Settings) -> None:
    """One line when sampling options were given but decoding is greedy (they would do nothing)."""
    given = [name for name in ("top_k", "top_p", "seed") if getattr(options, name) is not None]
    if settings.greedy and given:
        names = ", ".join("--" + name.replace("_", "-") for name in given)
        stderr_console().print(
            f"note: {names} {'affects' if len(given) == 1 else 'affect'} sampling only; decoding is greedy "
            "(temperature 0). "
            "Add --temperature T (> 0) to sample.",
            markup=False,
        )


def load_pair(
    models: ModelOptions,
    options: GenerationOptions,
    note_greedy: bool = True,
    no_color: bool = False,
    announce: str | None = None,
) -> tuple[Pair, Settings]:
    """Resolve the preset and the settings first (a typo fails before any model loads), load with a
    spinner, then the settings again as the loaded pair completes them (exit layer, drafter)."""
    resolved = check_before_loading(models, options)  # before torch: a usage error comes at once
    threads = parse_threads(models.threads)
    if note_greedy:
        greedy_note(options, resolved)
    from specli.api import check_model_options, load, preset_for

    strategies = [s for s in (models.strategy, *models.also) if s]
    preset = preset_for(models.preset, target=models.target, draft=models.draft, strategy=strategies or None)
    check_model_options(device=models.device, dtype=models.dtype, quant=models.quant)
    quiet_transformers()
    progress = loading_progress(stderr_console(no_color), announce=announce)
    with ctrl_c_ends_loading(), progress as download_bars:
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
            lean=models.lean,
            engine=models.engine,
        )
    if models.compile and pair.target.device.type != "cuda":
        stderr_console().print(
            "note: --compile on CPU: measured 5-15% faster plain decoding, no gain for draft, lookup or "
            "eagle (their drafters' steps are lean already). Every graph is built before the first round, "
            "measured on the embedded pair on 2 busy CPU cores: about 2 minutes cold (115-150 s), 10-40 s "
            "once torch's disk cache holds them.",
            markup=False,
        )
    if pair.engine != "torch":
        stderr_console().print(f"engine: {pair.describe_engine()}", markup=False)
    if pair.placement is not None:
        stderr_console().print(f"note: {pair.placement.describe()}", markup=False)
    if getattr(pair.target_model, "is_quantized", False) and pair.target.device.type == "cpu":
        stderr_console().print(
            "note: bitsandbytes quantization on CPU works but is slow: it saves memory, not time.",
            markup=False,
        )
    return pair, pair.settings(options)


@dataclass(frozen=True)
class Prepared:
    """A command's generation, ready to run: the pair, its settings, the prompt (text and ids), the rounds
    (not started) and, with --compile, the seconds spent compiling before them (None without)."""

    pair: Pair
    settings: Settings
    ids: list[int]
    text: str
    rounds: Iterator[Any]
    compile_time: float | None


def prepare_rounds(
    text: str, models: ModelOptions, options: GenerationOptions, record_top: int = 0, no_color: bool = False
) -> Prepared:
    """For the prompt `text` (as `prompt_text` read it): load the pair and its settings, say once what
    the run will not show (notes), compile (--compile) as a stage of its own, start the rounds."""
    pair, settings = load_pair(models, options, no_color=no_color)
    ids = pair.prompt_ids(text, chat=settings.chat)
    from specli.notes import generation_notes  # imports torch: only once a command runs a model

    for note in generation_notes(pair, settings, len(ids), models.strategy):
        stderr_console().print(f"note: {note}", markup=False)
    compile_time = compile_stage(pair, ids, settings, no_color) if pair.compile else None
    rounds = pair.stream(prompt_ids=ids, settings=settings, record_top=record_top)
    return Prepared(pair, settings, ids, text, rounds, compile_time)


COMPILE_PROGRESS_EVERY = 10.0  # seconds between the progress lines of a compile with no terminal


def compile_stage(
    pair: Pair,
    ids: list[int],
    settings: Settings,
    no_color: bool = False,
    every: float = COMPILE_PROGRESS_EVERY,
) -> float:
    """Build every compiled forward the generation will run, before its first round (`Pair.warm_up`);
    the seconds it took. In a terminal a spinner with the seconds so far; without one (piped), plain
    lines on stderr: one as it starts, then one every `every` seconds (seconds so far, graphs built)."""
    console = stderr_console(no_color)
    message = f"compiling {compile_what(pair, settings)} (torch.compile; cached on disk for next runs)"
    if console.is_terminal:
        with (
            console.status(message) as status,
            _every(1.0, lambda t, _: status.update(f"{message}: {t:.0f}s")),
        ):
            return pair.warm_up(prompt_ids=ids, settings=settings)
    console.print(f"{message} ...", markup=False)

    def line(seconds: float, graphs: int) -> None:
        console.print(f"still compiling: {seconds:.0f}s so far, {count(graphs, 'graph')} built", markup=False)

    with _every(every, line):
        return pair.warm_up(prompt_ids=ids, settings=settings)


def compile_what(pair: Pair, settings: Settings) -> str:
    """What --compile builds for these settings: "the target's plain steps" (strategy none), else "the
    target's verifies of 1..k+1 tokens", and the draft model's steps when they run compiled (not lean)."""
    if not entry(settings.strategy).drafts:
        return "the target's plain steps"
    what = f"the target's verifies of 1..{settings.num_draft_tokens + 1} tokens"
    if pair.drafter_step(settings.strategy) == "compiled":
        what += " and the draft model's steps"
    return what


@contextmanager
def _every(seconds: float, report: Callable[[float, int], None]) -> Iterator[None]:
    """Call report(seconds so far, graphs torch.compile built so far) every `seconds` from a thread while
    the block runs (the block is one long call: nothing else could report between its steps)."""
    from specli.models.static_cache import compiled_graphs

    done, start, before = threading.Event(), time.perf_counter(), compiled_graphs()

    def tick() -> None:
        while not done.wait(seconds):
            report(time.perf_counter() - start, compiled_graphs() - before)

    thread = threading.Thread(target=tick, name="specli-compile-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def compile_words(seconds: float | None) -> str | None:
    """'compiled in 41.2s (cached for next runs)' for a --compile run; None without."""
    if seconds is None:
        return None
    if seconds == 0.0:
        return "compiled forwards reused"
    return f"compiled in {seconds:.1f}s (cached for next runs)"


def save_view(renderable: Any, path: str, width: int, title: str) -> None:
    """Render into a recording console and write SVG or HTML (by extension)."""
    console = Console(
        record=True, file=io.StringIO(), width=width, force_terminal=True, color_system="truecolor"
    )
    console.print(renderable)
    if path.lower().endswith(".svg"):
        console.save_svg(path, title=title)
    else:
        console.save_html(path)
