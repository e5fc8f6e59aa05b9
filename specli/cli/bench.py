"""`specli bench`: strategies against plain decoding (and transformers) on prompt sets, per category; and
any OpenAI-compatible server (`--endpoint`, specli/bench/endpoint.py) on the same prompts, beside them or
alone (then no model loads)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
from specli.errors import UsageError
from specli.presets import MAX_DRAFT_TOKENS, MAX_TREE_NODES
from specli.render.bench import bench_view
from specli.render.progress import Counted
from specli.settings import STRATEGIES, check_strategy, resolve_settings
from specli.threads import AUTO

if TYPE_CHECKING:
    from specli.bench.endpoint import Endpoint, EndpointRunner


@app.command(
    cls=Command,
    epilog="Examples:\n\n"
    "  specli bench                                    # the embedded pair on its code prompt set\n\n"
    "  specli bench --strategy draft --strategy lookup --strategy self --category editing\n\n"
    "  specli bench --strategy draft --sweep-tree 4,8,16,32          # token trees of each size\n\n"
    "  specli bench --preset llama-70b-1b --set chat --limit 10 --compare-hf --json run.json\n\n"
    "  specli bench --preset qwen2.5-7b-0.5b --prompts question.jsonl    # Spec-Bench format\n\n"
    "  specli bench --strategy draft --endpoint http://127.0.0.1:8080/v1   # beside a running server\n\n"
    "  specli bench --endpoint vllm=http://gpu1:8000/v1 --endpoint llama=http://gpu1:8080 --set chat",
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
    tree: TreeOpt = None,
    tree_width: TreeWidthOpt = None,
    sweep_k: Annotated[
        str | None,
        typer.Option(
            "--sweep-k",
            help="Run every strategy at each k: a range '2-8' or a list '2,4,8'. Adds a table per strategy: "
            "tok/s, draft ms per round against k (what parallel drafting buys) and α by draft position.",
        ),
    ] = None,
    sweep_tree: Annotated[
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
    engine: EngineOpt = None,
    compile: CompileOpt = False,
    lean: LeanOpt = True,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            help="An OpenAI-compatible server to measure on the same prompts (repeatable): its API base URL, "
            "e.g. http://127.0.0.1:8000/v1, or NAME=URL to name its row. With endpoints only (no --strategy, "
            "--preset, --target or --draft) no model loads.",
            metavar="[NAME=]URL",
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(help="Bearer token sent to every endpoint.", envvar="SPECLI_API_KEY", show_envvar=True),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Model name asked of every endpoint (default: the first of its /models)."),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(help="Requests in flight at once per endpoint (1: one after another).", min=1)
    ] = 1,
    timeout: Annotated[
        float, typer.Option(help="Seconds an endpoint may stay silent before its request fails.", min=0.1)
    ] = 60.0,
    debug: DebugOpt = False,
) -> None:
    """Measure strategies against plain decoding (and transformers) on prompt sets, per category; and
    OpenAI-compatible servers (--endpoint) on the same prompts, beside them or alone."""
    from specli.bench import prompts as prompt_sets
    from specli.bench import run as b

    options = GenerationOptions(
        max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens, temperature=temperature,
        seed=seed, chat=chat, exit_layer=exit_layer, ngram_min=ngram_min, ngram_max=ngram_max,
        fixed_k=fixed_k or None, draft_p_min=draft_p_min, tree=tree, tree_width=tree_width,
    )  # fmt: skip
    with user_errors(debug):
        strategies = list(dict.fromkeys(check_strategy(s) for s in strategy or []))
        ks = parse_sweep(sweep_k) if sweep_k is not None else ()
        if ks and num_draft_tokens is not None:
            raise UsageError("give --sweep-k or --num-draft-tokens, not both.")
        trees = parse_sweep_tree(sweep_tree) if sweep_tree is not None else ()
        if ks and trees:
            raise UsageError("give --sweep-k or --sweep-tree, not both (a tree row keeps the settings' k).")
        if prompts and prompt_set:
            raise UsageError("give --prompts or --set, not both.")
        local = not endpoint or bool(strategies or preset or target or draft)
        endpoints = _endpoints(endpoint or [], api_key, model, local, compare_hf, ks, trees)
        source = Path(prompts) if prompts else (prompt_sets.set_path(prompt_set) if prompt_set else None)
        if source is None and not local:  # no model to choose the packaged set by
            source = prompt_sets.set_path("code")
        loaded = prompt_sets.read_prompts(source) if source else None
        if loaded is not None:  # a bad --category or --limit fails before anything loads
            prompt_sets.select_prompts(loaded, category or [], limit)
        elif category:  # the packaged set is chosen by the model: the category must be in one of them
            prompt_sets.check_packaged_categories(category)
        models = ModelOptions(
            preset=preset, target=target, draft=draft,
            strategy=strategies[0] if strategies else None, also=tuple(strategies[1:]),
            device=device, dtype=dtype, quant=quant, allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code, threads=threads, engine=engine, compile=compile, lean=lean,
        )  # fmt: skip
        if local:  # a missing folder or a bad -k is refused before any server is asked
            check_before_loading(models, options)
        err = stderr_console()
        runners = _start_endpoints(endpoints, timeout, err.print)
        if not local and all(r.error is not None for r in runners):
            _close(runners)  # each failure is on stderr, once; nothing else runs: no report to print
            raise typer.Exit(1)
        if local:
            pair, settings = load_pair(models, options, note_greedy=False, announce="bench")
            strategies = strategies or [pair.strategy]
            skipped_trees = b.tree_sweep_note(strategies) if trees else None
            if skipped_trees:
                err.print(f"note: {skipped_trees}", markup=False)
            sweep = {"num_draft_tokens": max(ks)} if ks else {}  # the largest k fits every model's context
            given = {**options.overrides(), **sweep}
            by_strategy = {  # each strategy's own settings (lookup's default k), valid before any run
                other: pair.settings(**given, strategy=other) for other in strategies
            }
            if loaded is None:
                loaded = prompt_sets.read_prompts(
                    prompt_sets.set_path("chat" if pair.uses_chat(settings.chat) else "code")
                )
            selected = prompt_sets.select_prompts(loaded, category or [], limit)
            encoded, skipped = b.encode_prompts(pair, selected, settings.chat)
            uses_chat = pair.uses_chat(settings.chat)
        else:
            _local_only_note(err.print, {
                "--num-draft-tokens": num_draft_tokens is not None, "--fixed-k": fixed_k,
                "--draft-p-min": draft_p_min is not None, "--exit-layer": exit_layer is not None,
                "--ngram-min/max": ngram_min is not None or ngram_max is not None, "--compile": compile,
                "--tree/--tree-width": tree is not None or tree_width is not None,
                "--device": device != "auto", "--dtype": dtype is not None, "--quant": quant is not None,
                "--threads": threads != AUTO,
            })  # fmt: skip
            pair, settings, by_strategy = None, resolve_settings(**options.overrides()), {}
            selected = prompt_sets.select_prompts(loaded or [], category or [], limit)
            encoded, skipped = [(p, []) for p in selected], []  # the servers tokenize the text
            uses_chat = bool(chat)
        bench_settings = b.BenchSettings(
            settings=settings,
            repeats=repeats,
            warmup=warmup,
            ks=ks,
            trees=trees,
            by_strategy={} if ks else by_strategy,
        )
        for note in skipped:
            err.print(f"warning: {note}", markup=False)
        live = [r for r in runners if r.error is None]
        for runner in live:  # the servers get the prompts as the local models do: templated when they are
            runner.bench, runner.chat = bench_settings, uses_chat
        if compare_hf and pair is not None and pair.engine != "torch":
            raise UsageError(
                f"--compare-hf runs transformers' own assisted generation, which the {pair.engine} engine "
                "has no model for.",
                "Use --engine torch with --compare-hf, or compare with llama-server through --endpoint.",
            )
        with Counted(err, "bench") as counted:  # every stage: its count and the time it has left
            modes = (
                b.transformers_modes(pair, strategies, settings, bench_settings.by_strategy)
                if compare_hf and pair
                else None
            )
            remotes = live if concurrency == 1 else []
            measurements = b.run_bench(
                pair, encoded, strategies, bench_settings, progress=counted, hf_modes=modes, remotes=remotes
            )  # transformers' runs and the servers' interleaved with specli's: drift hits all alike
            for runner in live if concurrency > 1 else []:
                runner.run_concurrently([p for p, _ in encoded], concurrency, counted)
        _close(runners)
        if not local and all(r.error is not None for r in runners):
            raise typer.Exit(1)  # every server failed mid-run (each told on stderr): nothing to report
        env = _environment(b, pair, dtype, quant, threads)
        served = None
        if runners:
            from specli.bench.endpoint import served_report

            served = served_report(runners)
        result = b.report(measurements, bench_settings, env, None, skipped, served=served)
        out = Console(highlight=False)
        if not out.is_terminal:
            out = Console(highlight=False, width=150)
        out.print(bench_view(result, told=[r.error for r in runners if r.error is not None]))
        if json_file:
            Path(json_file).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        if result["errors"]:
            raise typer.Exit(1)


def _endpoints(
    texts: list[str],
    api_key: str | None,
    model: str | None,
    local: bool,
    compare_hf: bool,
    ks: tuple[int, ...],
    trees: tuple[int, ...] = (),
) -> list[Endpoint]:
    """The --endpoint URLs as Endpoints (UsageError for a bad one, a label a local row could have, or
    local-only options when no model loads), after checking the `serve` extra is installed."""
    if not texts:
        return []
    try:
        import httpx  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as e:
        raise UsageError(
            f"bench --endpoint needs {e.name}, which is not installed.",
            "Install it in the specli checkout: pip install -e '.[serve]'.",
        ) from None
    if not local and compare_hf:
        raise UsageError("--compare-hf times a local model.", "Add --strategy (or --preset) to load one.")
    if not local and ks:
        raise UsageError("--sweep-k sweeps local strategies.", "Add --strategy (or --preset) to load one.")
    if not local and trees:
        raise UsageError("--sweep-tree sweeps local strategies: add --strategy (or --preset) to load one.")
    from specli.bench.endpoint import parse_endpoints

    return parse_endpoints(texts, api_key, model, taken=STRATEGIES if local else ())


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


def _start_endpoints(
    endpoints: list[Endpoint], timeout: float, say: Callable[..., None]
) -> list[EndpointRunner]:
    """Reach every endpoint before any model loads (a wrong URL or key fails at once): one error line
    each on stderr for those that cannot be reached; they stay in the list for the report."""
    from specli.bench.endpoint import EndpointRunner

    runners = []
    for e in endpoints:
        runner = EndpointRunner(e, timeout=timeout, on_error=lambda line: say(f"error: {line}", markup=False))
        runner.start()
        runners.append(runner)
    return runners


def _close(runners: list[EndpointRunner]) -> None:
    for runner in runners:
        runner.close()


def _environment(b: Any, pair: Any, dtype: str | None, quant: str | None, threads: str) -> dict[str, Any]:
    """The report's environment: the local machine's and models' (none when no model loaded)."""
    if pair is None:
        from specli.bench.endpoint import client_environment

        return client_environment()
    env = b.environment(pair, dtype, quant)
    env["peak_memory_bytes"] = b.peak_memory_bytes(pair.target.device)
    env["threads_option"] = threads  # env["threads"]: the count torch used
    env["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    return env


def parse_sweep(text: str) -> tuple[int, ...]:
    """'2-8' -> (2, 3, ..., 8); '2,4,8' -> (2, 4, 8); each k in 1..MAX_DRAFT_TOKENS. UsageError otherwise."""
    fix = f"Give a range like 2-8 or a list like 2,4,8 (k from 1 to {MAX_DRAFT_TOKENS})."
    try:
        if "-" in text and "," not in text:  # a list may name negative k: "-1,2" is a list
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
    low_ks = sorted({k for k in ks if k < 1})
    if low_ks:
        named = ", ".join(str(k) for k in low_ks)
        raise UsageError(
            f"--sweep-k '{text}': k {named} {'is' if len(low_ks) == 1 else 'are'} out of range.", fix
        )
    if max(ks) > MAX_DRAFT_TOKENS:
        raise UsageError(f"--sweep-k '{text}' goes past the largest k, {MAX_DRAFT_TOKENS}.", fix)
    return tuple(sorted(set(ks)))


def parse_sweep_tree(text: str) -> tuple[int, ...]:
    """'0,4,8,16,32' -> (0, 4, 8, 16, 32): tree sizes (nodes a round), each 0..MAX_TREE_NODES (0: a chain
    row, beside the trees in the same run), sorted, once each. A one-line UsageError otherwise."""
    fix = f"give a list of tree sizes like 4,8,16,32 (each 1 to {MAX_TREE_NODES}; 0 adds the chain)"
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--sweep-tree '{text}' is not a list of numbers: {fix}.") from None
    bad = sorted({n for n in sizes if not 0 <= n <= MAX_TREE_NODES})
    if bad:
        named = ", ".join(str(n) for n in bad)
        sizes_are = f"size {named} is" if len(bad) == 1 else f"sizes {named} are"
        raise UsageError(f"--sweep-tree '{text}': {sizes_are} out of range: {fix}.")
    return tuple(sorted(set(sizes)))
