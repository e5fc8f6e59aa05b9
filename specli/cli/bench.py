"""`specli bench`: strategies against plain decoding (and transformers) on prompt sets, per category; and
any OpenAI-compatible server (`--endpoint`, specli/bench/endpoint.py) on the same prompts, beside them or
alone (then no model loads). A thin layer over specli/bench/: the options parsed here, the plan
(bench/plan.py) and its stages (bench/session.py) there; the notes, the progress and the report shown here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from specli.bench.plan import BenchOptions, BenchPlan, plan_bench
from specli.bench.plan import parse_sweep as parse_sweep  # re-exported: specli.cli.parse_sweep
from specli.bench.plan import parse_sweep_tree as parse_sweep_tree
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
    ModelOptions,
    NgramMaxOpt,
    NgramMinOpt,
    PresetOpt,
    QuantOpt,
    TargetOpt,
    ThreadsOpt,
    TreeOpt,
    TreeWidthOpt,
    TrustOpt,
    check_before_loading,
)
from specli.cli.run import load_pair
from specli.render.bench import bench_view
from specli.render.progress import Counted
from specli.threads import AUTO

if TYPE_CHECKING:
    from specli.bench.endpoint import EndpointRunner
    from specli.bench.session import Workload

EXAMPLES = (
    "Examples:\n\n"
    "  specli bench                                    # the embedded pair on its code prompt set\n\n"
    "  specli bench --strategy draft --strategy lookup --strategy self --category editing\n\n"
    "  specli bench --strategy draft --sweep-tree 4,8,16,32          # token trees of each size\n\n"
    "  specli bench --preset llama-70b-1b --set chat --limit 10 --compare-hf --json run.json\n\n"
    "  specli bench --preset qwen2.5-7b-0.5b --prompts question.jsonl    # Spec-Bench format\n\n"
    "  specli bench --strategy draft --endpoint http://127.0.0.1:8080/v1   # beside a running server\n\n"
    "  specli bench --endpoint vllm=http://gpu1:8000/v1 --endpoint llama=http://gpu1:8080 --set chat"
)
StrategiesOpt = Annotated[
    list[str] | None,
    typer.Option(help="Strategy to measure (repeatable; default: the preset's). Plain decoding always runs."),
]
PromptsOpt = Annotated[
    str | None, typer.Option(help="Prompts: Spec-Bench question.jsonl, JSONL with 'prompt', or text lines.")
]
SetOpt = Annotated[
    str | None, typer.Option("--set", help="A packaged prompt set: code or chat (default: by the model).")
]
CategoryOpt = Annotated[list[str] | None, typer.Option(help="Only this category (repeatable).")]
LimitOpt = Annotated[int | None, typer.Option(help="At most N prompts per category.", min=1)]
MaxNewOpt = Annotated[int, typer.Option(help="Tokens generated per prompt.", min=1)]
SweepKOpt = Annotated[
    str | None,
    typer.Option(
        "--sweep-k",
        help="Run every strategy at each k: a range '2-8' or a list '2,4,8'. Adds a table per strategy: "
        "tok/s, draft ms per round against k (what parallel drafting buys) and α by draft position.",
    ),
]
SweepTreeOpt = Annotated[
    str | None,
    typer.Option(
        "--sweep-tree",
        help="Also run every strategy that drafts trees (draft, lookup, eagle) with a token tree of each "
        "size: a list of node counts '4,8,16,32' (1 to 64). One more row per size, e.g. 'draft tree 8', "
        "every round the whole tree at depth k (--fixed-k); its nodes/round, and α by position as α by "
        "depth. 0 adds the chain as a row of the same run ('draft chain'). self (chains only) gets no "
        "such rows.",
        metavar="N,N,...",
    ),
]
TemperatureOpt = Annotated[float, typer.Option(help="0 = greedy (outputs are checked for identity).")]
SeedOpt = Annotated[int, typer.Option(help="Seed for sampling runs.")]
RepeatsOpt = Annotated[int, typer.Option(help="Runs per prompt and strategy (median).", min=1)]
WarmupOpt = Annotated[int, typer.Option(help="Uncounted warm-up runs per strategy.", min=0)]
IgnoreEosOpt = Annotated[
    bool,
    typer.Option(
        "--ignore-eos",
        help="Every run generates --max-new-tokens tokens: EOS stops neither specli's runs nor the "
        "endpoints' or transformers' (sampled texts otherwise end at different lengths, and tok/s weighs "
        "different shares of prefill).",
    ),
]
CompareHfOpt = Annotated[
    bool, typer.Option("--compare-hf", help="Also time transformers' own (assisted) generate().")
]
JsonFileOpt = Annotated[
    str | None, typer.Option("--json", help="Write every measurement and the environment to FILE.")
]
EndpointOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="An OpenAI-compatible server to measure on the same prompts (repeatable): its API base URL, "
        "e.g. http://127.0.0.1:8000/v1, or NAME=URL to name its row. With endpoints only (no --strategy, "
        "--preset, --target or --draft) no model loads.",
        metavar="[NAME=]URL",
    ),
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(help="Bearer token sent to every endpoint.", envvar="SPECLI_API_KEY", show_envvar=True),
]
ModelNameOpt = Annotated[
    str | None, typer.Option(help="Model name asked of every endpoint (default: the first of its /models).")
]
ConcurrencyOpt = Annotated[
    int, typer.Option(help="Requests in flight at once per endpoint (1: one after another).", min=1)
]
TimeoutOpt = Annotated[
    float, typer.Option(help="Seconds an endpoint may stay silent before its request fails.", min=0.1)
]


@app.command(cls=Command, epilog=EXAMPLES)
def bench(
    preset: PresetOpt = None,
    target: TargetOpt = None,
    draft: DraftOpt = None,
    strategy: StrategiesOpt = None,
    prompts: PromptsOpt = None,
    prompt_set: SetOpt = None,
    category: CategoryOpt = None,
    limit: LimitOpt = None,
    max_new_tokens: MaxNewOpt = 128,
    num_draft_tokens: DraftTokensOpt = None,
    tree: TreeOpt = None,
    tree_width: TreeWidthOpt = None,
    sweep_k: SweepKOpt = None,
    sweep_tree: SweepTreeOpt = None,
    temperature: TemperatureOpt = 0.0,
    seed: SeedOpt = 0,
    repeats: RepeatsOpt = 1,
    warmup: WarmupOpt = 1,
    ignore_eos: IgnoreEosOpt = False,
    exit_layer: ExitLayerOpt = None,
    ngram_min: NgramMinOpt = None,
    ngram_max: NgramMaxOpt = None,
    fixed_k: FixedKOpt = False,
    draft_p_min: DraftPMinOpt = None,
    compare_hf: CompareHfOpt = False,
    json_file: JsonFileOpt = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = None,
    quant: QuantOpt = None,
    chat: ChatOpt = None,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustOpt = False,
    threads: ThreadsOpt = AUTO,
    engine: EngineOpt = None,
    compile: CompileOpt = False,
    lean: LeanOpt = True,
    endpoint: EndpointOpt = None,
    api_key: ApiKeyOpt = None,
    model: ModelNameOpt = None,
    concurrency: ConcurrencyOpt = 1,
    timeout: TimeoutOpt = 60.0,
    debug: DebugOpt = False,
) -> None:
    """Measure strategies against plain decoding, transformers and OpenAI-compatible servers, per category."""
    models = ModelOptions(
        preset=preset, target=target, draft=draft, device=device, dtype=dtype, quant=quant,
        allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, threads=threads, engine=engine,
        compile=compile, lean=lean)  # fmt: skip
    options = GenerationOptions(
        max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens, temperature=temperature, seed=seed,
        chat=chat, exit_layer=exit_layer, ngram_min=ngram_min, ngram_max=ngram_max, fixed_k=fixed_k or None,
        draft_p_min=draft_p_min, tree=tree, tree_width=tree_width, ignore_eos=ignore_eos or None)  # fmt: skip
    wanted = BenchOptions(
        strategies=tuple(strategy or ()), prompts=prompts, prompt_set=prompt_set, limit=limit,
        categories=tuple(category or ()), sweep_k=sweep_k, sweep_tree=sweep_tree, repeats=repeats,
        warmup=warmup, compare_hf=compare_hf, json_file=json_file, endpoints=tuple(endpoint or ()),
        api_key=api_key, model=model, concurrency=concurrency, timeout=timeout)  # fmt: skip
    run_bench_command(models, options, wanted, debug)


def run_bench_command(
    models: ModelOptions, options: GenerationOptions, wanted: BenchOptions, debug: bool = False
) -> None:
    """The bench: its plan checked before anything loads, the servers reached, the models loaded (unless
    servers alone are measured), the runs with their progress, the report on stdout (and --json); a
    failure as one or two lines and an exit code."""
    from specli.bench import session

    with user_errors(debug):
        plan = plan_bench(
            wanted,
            k_given=options.num_draft_tokens is not None,
            names_models=bool(models.preset or models.target or models.draft),
        )
        models = replace(models, strategy=next(iter(plan.strategies), None), also=plan.strategies[1:])
        if plan.local:  # a missing folder or a bad -k is refused before any server is asked
            check_before_loading(models, options)
        err = stderr_console()
        runners = session.start_endpoints(
            plan.endpoints, wanted.timeout, on_error=lambda line: err.print(f"error: {line}", markup=False)
        )
        if not plan.local and session.all_failed(runners):
            session.close(runners)  # each failure is on stderr, once; nothing else runs: no report to print
            raise typer.Exit(1)
        work = _local(plan, models, options, err) if plan.local else _served(plan, models, options, err)
        for note in work.skipped:
            err.print(f"warning: {note}", markup=False)
        live = session.attach(runners, work)
        session.check_compare_hf(work.pair, wanted.compare_hf)
        with Counted(err, "bench") as counted:  # every stage: its count and the time it has left
            measurements = session.run(work, live, wanted.compare_hf, wanted.concurrency, progress=counted)
        session.close(runners)
        if not plan.local and session.all_failed(runners):
            raise typer.Exit(1)  # every server failed mid-run (each told on stderr): nothing to report
        result = session.bench_report(work, measurements, runners, models.dtype, models.quant, models.threads)
        _show(result, runners)
        if wanted.json_file:
            session.write_report(wanted.json_file, result)
        if result["errors"]:
            raise typer.Exit(1)


def _local(plan: BenchPlan, models: ModelOptions, options: GenerationOptions, err: Console) -> Workload:
    """Load the pair (its notes on stderr), say which strategies a tree sweep makes no rows for, and
    the work it runs."""
    from specli.bench import run as b
    from specli.bench import session

    pair, settings = load_pair(models, options, note_greedy=False, announce="bench")
    strategies = session.run_strategies(plan, pair)
    skipped_trees = b.tree_sweep_note(strategies) if plan.trees else None
    if skipped_trees:
        err.print(f"note: {skipped_trees}", markup=False)
    return session.local_workload(plan, pair, settings, strategies, options)


def _served(plan: BenchPlan, models: ModelOptions, options: GenerationOptions, err: Console) -> Workload:
    """The work of servers alone, after one line naming the local-only options given (none runs here)."""
    from specli.bench import session

    _local_only_note(err.print, {
        "--num-draft-tokens": options.num_draft_tokens is not None, "--fixed-k": bool(options.fixed_k),
        "--draft-p-min": options.draft_p_min is not None, "--exit-layer": options.exit_layer is not None,
        "--ngram-min/max": options.ngram_min is not None or options.ngram_max is not None,
        "--compile": models.compile,
        "--tree/--tree-width": options.tree is not None or options.tree_width is not None,
        "--device": models.device != "auto", "--dtype": models.dtype is not None,
        "--quant": models.quant is not None, "--threads": models.threads != AUTO,
    })  # fmt: skip
    return session.served_workload(plan, options)


def _local_only_note(say: Callable[..., None], given: dict[str, bool]) -> None:
    """One line when options that only a local model uses were given to a bench of servers alone."""
    names = [name for name, on in given.items() if on]
    if names:
        say(
            f"note: {', '.join(names)} {'is' if len(names) == 1 else 'are'} for local runs, and with "
            "--endpoint alone none runs here (each server drafts as it was started). "
            "Add --strategy S to run one beside them.",
            markup=False,
        )


def _show(result: dict[str, Any], runners: list[EndpointRunner]) -> None:
    """The report's tables on stdout (150 columns when piped); the servers' errors were told already."""
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=150)
    out.print(bench_view(result, told=[r.error for r in runners if r.error is not None]))
