"""`specli explain PROMPT`: each round's draft, its check, and the correction or bonus, one panel each."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.text import Text

from specli.cli.app import Command, app
from specli.cli.common import stderr_console, user_errors
from specli.cli.options import (
    AllowPickleOpt,
    ChatOpt,
    CompileOpt,
    DebugOpt,
    DeviceOpt,
    DraftOpt,
    DraftPMinOpt,
    DraftTokensOpt,
    DtypeOpt,
    EngineOpt,
    ExitLayerOpt,
    FixedKOpt,
    GenerationOptions,
    LeanOpt,
    MaxNewOpt,
    ModelOptions,
    NgramMaxOpt,
    NgramMinOpt,
    NoColorOpt,
    PresetOpt,
    PromptArg,
    PromptFileOpt,
    QuantOpt,
    SaveOpt,
    SeedOpt,
    StopOpt,
    StrategyOpt,
    TargetOpt,
    TemperatureOpt,
    ThreadsOpt,
    TopKOpt,
    TopPOpt,
    TreeOpt,
    TreeWidthOpt,
    TrustOpt,
    check_save,
)
from specli.cli.prompt_input import StepKeys, prompt_text
from specli.cli.run import Prepared, compile_words, prepare_rounds, save_view
from specli.render.explain import ExplainView
from specli.threads import AUTO


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


EXAMPLES = (
    "Examples:\n\n"
    "  specli explain 'def fibonacci(n):' --temperature 0.8 --seed 1\n\n"
    "  specli explain 'def fibonacci(n):' --rounds 5 --step            # Enter between rounds\n\n"
    "  specli explain 'for i in range(10):' --strategy lookup --pace 0 --save rounds.svg\n\n"
    "  specli explain 'def fibonacci(n):' --tree 8 --rounds 3          # each round's token tree"
)
RoundsOpt = Annotated[int | None, typer.Option("--rounds", help="Stop after this many rounds.", min=1)]
PaceOpt = Annotated[float, typer.Option(help="Seconds to pause between rounds (0 for none).", min=0)]
StepOpt = Annotated[
    bool,
    typer.Option(
        "--step",
        help="Wait for a key between rounds (Enter: the next round, q: stop), read from the terminal.",
    ),
]
TopOpt = Annotated[int, typer.Option(help="Entries of a distribution to show.", min=1)]


@app.command(cls=Command, epilog=EXAMPLES)
def explain(
    prompt: PromptArg = None,
    prompt_file: PromptFileOpt = None,
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
    tree: TreeOpt = None,
    tree_width: TreeWidthOpt = None,
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
    rounds_limit: RoundsOpt = None,
    pace: PaceOpt = 1.0,
    step: StepOpt = False,
    top: TopOpt = 5,
    no_color: NoColorOpt = False,
    save: SaveOpt = None,
    threads: ThreadsOpt = AUTO,
    engine: EngineOpt = None,
    compile: CompileOpt = False,
    lean: LeanOpt = True,
    debug: DebugOpt = False,
) -> None:
    """Walk through speculative decoding round by round: each draft, its check, the correction or bonus."""
    models = ModelOptions(
        preset=preset, target=target, draft=draft, strategy=strategy, device=device, dtype=dtype,
        quant=quant, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, threads=threads,
        engine=engine, compile=compile, lean=lean)  # fmt: skip
    options = GenerationOptions(
        max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens, temperature=temperature,
        top_k=top_k, top_p=top_p, seed=seed, stop=stop, chat=chat, exit_layer=exit_layer,
        ngram_min=ngram_min, ngram_max=ngram_max, fixed_k=fixed_k or None,
        draft_p_min=draft_p_min, tree=tree, tree_width=tree_width)  # fmt: skip
    on_stdin = "-" in (prompt, prompt_file)
    with user_errors(debug), _step_keys(step, prompt_on_stdin=on_stdin) as keys:
        check_save(save)
        text = prompt_text(prompt, prompt_file)
        run = prepare_rounds(text, models, options, record_top=top, no_color=no_color)
        if explain_rounds(run, Pacing(rounds_limit, pace, keys), top, save, no_color):
            raise typer.Exit(130)  # Ctrl-C: the rounds so far and their summary are shown


@dataclass(frozen=True)
class Pacing:
    """When the walk stops (after `rounds_limit` rounds; None: at the generation's end) and what it
    waits for between rounds: a key (--step), else `pace` seconds in a terminal."""

    rounds_limit: int | None = None
    pace: float = 0.0
    keys: StepKeys | None = None


def explain_rounds(
    run: Prepared, pacing: Pacing, top: int = 5, save: str | None = None, no_color: bool = False
) -> bool:
    """The prompt, one panel per round as it comes, the summary (and the --save file); whether Ctrl-C
    ended the rounds (end of input on the keys ends them too, quietly)."""
    pair, settings = run.pair, run.settings
    if run.compile_time is not None:  # before the rounds, never inside their times
        stderr_console().print(f"note: {compile_words(run.compile_time)}", markup=False)
    out = Console(highlight=False, no_color=no_color or None)
    explained = ExplainView(
        pair.tokenizer,
        settings.strategy,
        settings.num_draft_tokens,
        greedy=settings.greedy,
        top=top,
        prompt_ids=run.ids,
    )
    shown: list[Any] = []
    out.print(Text.assemble(("prompt: ", "bold"), run.text))
    interrupted = _walk(run.rounds, explained, out, shown, pacing)
    summary = explained.summary()
    shown.append(summary)
    out.print(summary)
    if save:
        save_view(Group(*shown), save, max(out.width, 100), "specli explain")
    return interrupted


def _walk(
    rounds: Iterator[Any], explained: ExplainView, out: Console, shown: list[Any], pacing: Pacing
) -> bool:
    """Print each round's panel (kept in `shown`), pausing between rounds as `pacing` says; whether
    Ctrl-C stopped it."""
    try:
        for r in rounds:
            panel = explained.panel(r)
            shown.append(panel)
            out.print(panel)
            if pacing.rounds_limit is not None and r.index + 1 >= pacing.rounds_limit:
                break
            if r.stop is None:
                if pacing.keys is not None:
                    if not pacing.keys.next_round():
                        break
                elif pacing.pace > 0 and out.is_terminal:  # piped: nobody watches the pace
                    time.sleep(pacing.pace)
    except (KeyboardInterrupt, EOFError) as e:
        return isinstance(e, KeyboardInterrupt)
    return False
