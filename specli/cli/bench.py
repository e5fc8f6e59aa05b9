"""`specli bench`: strategies against plain decoding (and transformers) on prompt sets, per category."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

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
    ExitLayerOpt,
    FixedKOpt,
    GenerationOptions,
    ModelOptions,
    NgramMaxOpt,
    NgramMinOpt,
    PresetOpt,
    QuantOpt,
    TargetOpt,
    ThreadsOpt,
    TrustOpt,
)
from specli.cli.run import load_pair
from specli.errors import UsageError
from specli.presets import MAX_DRAFT_TOKENS
from specli.render.bench import bench_view
from specli.render.progress import Counted
from specli.settings import check_strategy
from specli.threads import AUTO


@app.command(
    cls=Command,
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
    with user_errors(debug):
        strategies = list(dict.fromkeys(check_strategy(s) for s in strategy or []))
        ks = parse_sweep(sweep_k) if sweep_k is not None else ()
        if ks and num_draft_tokens is not None:
            raise UsageError("give --sweep-k or --num-draft-tokens, not both.")
        if prompts and prompt_set:
            raise UsageError("give --prompts or --set, not both.")
        source = Path(prompts) if prompts else (b.set_path(prompt_set) if prompt_set else None)
        loaded = b.read_prompts(source) if source else None
        if loaded is not None:  # a bad --category or --limit fails before anything loads
            b.select_prompts(loaded, category or [], limit)
        elif category:  # the packaged set is chosen by the model: the category must be in one of them
            b.check_packaged_categories(category)
        models = ModelOptions(
            preset=preset, target=target, draft=draft,
            strategy=strategies[0] if strategies else None, also=tuple(strategies[1:]),
            device=device, dtype=dtype, quant=quant, allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code, threads=threads, compile=compile,
        )  # fmt: skip
        pair, settings = load_pair(models, options, note_greedy=False, announce="bench")
        strategies = strategies or [pair.strategy]
        sweep = {"num_draft_tokens": max(ks)} if ks else {}  # the largest k fits every model's context
        for other in strategies:  # each strategy's settings are valid for this pair, before any run
            pair.settings(**{**options.overrides(), **sweep}, strategy=other)
        if loaded is None:
            loaded = b.read_prompts(b.set_path("chat" if pair.uses_chat(settings.chat) else "code"))
        selected = b.select_prompts(loaded, category or [], limit)
        bench_settings = b.BenchSettings(settings=settings, repeats=repeats, warmup=warmup, ks=ks)
        err = stderr_console()
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
    """'2-8' -> (2, 3, ..., 8); '2,4,8' -> (2, 4, 8); each k in 1..MAX_DRAFT_TOKENS. UsageError otherwise."""
    fix = f"Give a range like 2-8 or a list like 2,4,8 (k from 1 to {MAX_DRAFT_TOKENS})."
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-"))
            if low > high:
                raise UsageError(
                    f"--sweep-k '{text}' is a reversed range ({low} > {high}).",
                    f"Write it low-high: {high}-{low}.",
                )
            ks = tuple(range(low, high + 1))
        else:
            ks = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--sweep-k '{text}' is not a range or a list of numbers.", fix) from None
    if not ks or min(ks) < 1:
        raise UsageError(f"--sweep-k '{text}' names no k >= 1.", fix)
    if max(ks) > MAX_DRAFT_TOKENS:
        raise UsageError(f"--sweep-k '{text}' goes past the largest k, {MAX_DRAFT_TOKENS}.", fix)
    return tuple(sorted(set(ks)))
