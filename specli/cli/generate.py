"""`specli generate PROMPT`: the target's output, faster, shown live, streamed plain, or as JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Annotated, Any

import typer
from rich.console import Console

from specli.cli.app import Command, app
from specli.cli.common import stderr_console, user_errors
from specli.cli.options import (
    VIEWS,
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
    JsonOpt,
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
from specli.cli.prompt_input import prompt_text
from specli.cli.run import Prepared, compile_words, prepare_rounds, save_view
from specli.errors import UsageError
from specli.render.live import LiveView, TokenView
from specli.render.plain import PlainWriter
from specli.threads import AUTO
from specli.wording import summary_line

EXAMPLES = (
    "Examples:\n\n"
    "  specli generate 'def fibonacci(n):'            # the embedded tiny pair, offline\n\n"
    "  specli generate 'def fibonacci(n):' --strategy self --exit-layer 3\n\n"
    "  specli generate 'def fibonacci(n):' --target ./target --draft ./drafter\n\n"
    "  specli generate 'def fibonacci(n):' --tree 16 --tree-width 2   # token trees, 16 nodes a round\n\n"
    "  specli generate 'Explain KV caches' --preset llama-8b-1b --max-new-tokens 200\n\n"
    "  echo 'Once upon a time' | specli generate - --preset qwen2.5-7b-0.5b \\\n"
    "      --temperature 0.7 --seed 1 --json"
)
ViewOpt = Annotated[
    str | None,
    typer.Option(
        help="live (coloured tokens, the default in a terminal), plain (streamed text; the default "
        "when piped) or none (the text at the end)."
    ),
]


@app.command(cls=Command, epilog=EXAMPLES)
def generate(
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
    view: ViewOpt = None,
    no_color: NoColorOpt = False,
    save: SaveOpt = None,
    as_json: JsonOpt = False,
    threads: ThreadsOpt = AUTO,
    engine: EngineOpt = None,
    compile: CompileOpt = False,
    lean: LeanOpt = True,
    debug: DebugOpt = False,
) -> None:
    """Generate text with speculative decoding; output is exactly the target's own."""
    models = ModelOptions(
        preset=preset, target=target, draft=draft, strategy=strategy, device=device, dtype=dtype,
        quant=quant, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, threads=threads,
        engine=engine, compile=compile, lean=lean)  # fmt: skip
    options = GenerationOptions(
        max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens, temperature=temperature,
        top_k=top_k, top_p=top_p, seed=seed, stop=stop, chat=chat, exit_layer=exit_layer,
        ngram_min=ngram_min, ngram_max=ngram_max, fixed_k=fixed_k or None,
        draft_p_min=draft_p_min, tree=tree, tree_width=tree_width)  # fmt: skip
    with user_errors(debug):
        if view is not None and view not in VIEWS:
            raise UsageError(f"unknown view '{view}'.", f"Use one of: {', '.join(VIEWS)}.")
        check_save(save)
        run = prepare_rounds(prompt_text(prompt, prompt_file), models, options, no_color=no_color)
        if show_generation(run, models.strategy, "json" if as_json else view, save, no_color):
            raise typer.Exit(130)  # Ctrl-C: what was generated so far is shown


def show_generation(
    run: Prepared, strategy: str | None, view: str | None, save: str | None, no_color: bool = False
) -> bool:
    """Run the rounds into the view (live, plain, none or json; None: live in a terminal, else plain),
    then the text or the JSON on stdout, the summary line on stderr (plain, none) and the --save file;
    whether Ctrl-C ended the rounds."""
    stdout = Console(highlight=False, no_color=no_color or None, soft_wrap=True)
    mode = view or ("live" if stdout.is_terminal else "plain")
    settings, k = run.settings, run.settings.num_draft_tokens
    token_view = TokenView(run.pair.tokenizer, settings.strategy, k, prompt=run.text)
    token_view.compiled = compile_words(run.compile_time)
    live = LiveView(token_view, stdout) if mode == "live" else None
    writer = PlainWriter(sys.stdout) if mode == "plain" else None
    collected, interrupted = _follow(run.rounds, token_view, live, writer)
    from specli.pair import GenerationStats

    stats = GenerationStats.of(
        run.pair, settings, len(run.ids), strategy, compile_time=run.compile_time, interrupted=interrupted
    )  # the settings beside the counts: what Result.stats carries in Python
    for r in collected:
        stats.observe(r)
    _write_output(run, mode, collected, stats, writer)
    if interrupted and mode != "json":
        stderr_console().print("interrupted: showing what was generated so far", markup=False)
    if mode in ("plain", "none"):
        stderr_console().print(
            summary_line(stats, settings.strategy, k, settings.exit_layer, compiled=token_view.compiled),
            markup=False,
        )
    if save:
        if live is None:  # the live view built it as it went; otherwise replay the rounds
            for r in collected:
                token_view.add(r)
            token_view.finish()
        save_view(token_view.renderable(), save, max(stdout.width, 80), "specli generate")
    return interrupted


def _follow(
    rounds: Iterator[Any], token_view: TokenView, live: LiveView | None, writer: PlainWriter | None
) -> tuple[list[Any], bool]:
    """Every round, shown as it comes (live or plain); Ctrl-C ends them early, and the live view's final
    frame says so. The rounds seen, and whether Ctrl-C ended them."""
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
    return collected, interrupted


def _write_output(
    run: Prepared, mode: str, collected: list[Any], stats: Any, writer: PlainWriter | None
) -> None:
    """The result on stdout: one JSON object (json), the text at the end (none), or the newline that
    ends the streamed text (plain); the live view has shown it already."""
    tokens = [t for r in collected for t in r.committed]
    if mode == "json":
        from specli.pair import Result

        result = Result(run.pair.decode(tokens), tokens, run.ids, stats, collected).to_dict()
        typer.echo(json.dumps(result, ensure_ascii=False))
    elif mode != "live":
        if writer is None:  # --view none: the text at the end
            sys.stdout.write(run.pair.decode(tokens))
        sys.stdout.write("\n")
        sys.stdout.flush()
