"""`specli explain PROMPT`: each round's draft, its check, and the correction or bonus, one panel each."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
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
from specli.cli.run import compile_words, prepare_rounds, save_view
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


@app.command(
    cls=Command,
    epilog="Examples:\n\n"
    "  specli explain 'def fibonacci(n):' --temperature 0.8 --seed 1\n\n"
    "  specli explain 'def fibonacci(n):' --rounds 5 --step            # Enter between rounds\n\n"
    "  specli explain 'for i in range(10):' --strategy lookup --pace 0 --save rounds.svg\n\n"
    "  specli explain 'def fibonacci(n):' --tree 8 --rounds 3          # each round's token tree",
)
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
    engine: EngineOpt = None,
    compile: CompileOpt = False,
    lean: LeanOpt = True,
    debug: DebugOpt = False,
) -> None:
    """Walk through speculative decoding round by round: each draft, its check, the correction or bonus."""
    models = ModelOptions(
        preset=preset, target=target, draft=draft, strategy=strategy, device=device, dtype=dtype,
        quant=quant, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, threads=threads,
        engine=engine,
        compile=compile, lean=lean,
    )  # fmt: skip
    options = GenerationOptions(
        max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens, temperature=temperature,
        top_k=top_k, top_p=top_p, seed=seed, stop=stop, chat=chat, exit_layer=exit_layer,
        ngram_min=ngram_min, ngram_max=ngram_max, fixed_k=fixed_k or None,
        draft_p_min=draft_p_min, tree=tree, tree_width=tree_width,
    )  # fmt: skip
    on_stdin = "-" in (prompt, prompt_file)
    with user_errors(debug), _step_keys(step, prompt_on_stdin=on_stdin) as keys:
        check_save(save)
        text = prompt_text(prompt, prompt_file)
        run = prepare_rounds(text, models, options, record_top=top, no_color=no_color)
        pair, settings, ids, text, rounds = run.pair, run.settings, run.ids, run.text, run.rounds
        if run.compile_time is not None:  # before the rounds, never inside their times
            stderr_console().print(f"note: {compile_words(run.compile_time)}", markup=False)
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
            save_view(Group(*shown), save, max(out.width, 100), "specli explain")
        if interrupted:
            raise typer.Exit(130)
