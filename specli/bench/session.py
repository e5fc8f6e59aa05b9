"""A `specli bench` from its plan (specli/bench/plan.py) to its report, in the stages the command shows:
the servers reached (`start_endpoints`), the work of a local bench once its pair is loaded
(`local_workload`) or of servers alone (`served_workload`), the runs (`run`: local strategies, transformers
and servers in one rotation, or the servers N requests at a time), the report (`bench_report`) and its JSON
file (`write_report`). Loading the pair, the progress display and every message are the caller's: nothing
here prints (a server's failure goes to the `on_error` it is given)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specli.bench import prompts as prompt_sets
from specli.bench import run as b
from specli.bench.endpoint import Endpoint, EndpointRunner, client_environment, served_report
from specli.bench.plan import BenchPlan
from specli.bench.prompts import BenchPrompt
from specli.errors import UsageError
from specli.settings import SettingsChange, resolve_settings

if TYPE_CHECKING:
    from specli.pair import Pair
    from specli.settings import Settings


@dataclass(frozen=True)
class Workload:
    """What a bench runs: the pair (None: servers alone), the strategies, each prompt with its ids (none
    for servers alone: the servers tokenize the text), one note per prompt skipped, the settings, and
    whether the servers get the prompts as chat messages (as the local models do)."""

    pair: Pair | None
    strategies: list[str]
    encoded: list[tuple[BenchPrompt, list[int]]]
    skipped: list[str]
    bench: b.BenchSettings
    chat: bool


def start_endpoints(
    endpoints: Sequence[Endpoint], timeout: float, on_error: Callable[[str], None]
) -> list[EndpointRunner]:
    """Reach every endpoint before any model loads (a wrong URL or key fails at once): `on_error` hears
    one line for each that cannot be reached; they stay in the list for the report."""
    runners = []
    for e in endpoints:
        runner = EndpointRunner(e, timeout=timeout, on_error=on_error)
        runner.start()
        runners.append(runner)
    return runners


def all_failed(runners: Sequence[EndpointRunner]) -> bool:
    return all(r.error is not None for r in runners)


def close(runners: Sequence[EndpointRunner]) -> None:
    for runner in runners:
        runner.close()


def run_strategies(plan: BenchPlan, pair: Pair) -> list[str]:
    """The strategies a local bench runs: those asked for, else the pair's own."""
    return list(plan.strategies) or [pair.strategy]


def local_workload(
    plan: BenchPlan, pair: Pair, settings: Settings, strategies: list[str], change: SettingsChange
) -> Workload:
    """A local bench's work on the loaded pair: each strategy's own settings (lookup's default k; at the
    largest k of a sweep, which fits every model's context), valid before any run; the prompts (the
    packaged set the model chooses, chat or code, unless a file or set was named), encoded."""
    swept = change.merged(num_draft_tokens=max(plan.ks)) if plan.ks else change
    by_strategy = {other: pair.settings(swept, strategy=other) for other in strategies}
    loaded = plan.prompts
    if loaded is None:
        loaded = prompt_sets.read_prompts(
            prompt_sets.set_path("chat" if pair.uses_chat(settings.chat) else "code")
        )
    selected = prompt_sets.select_prompts(loaded, plan.options.categories, plan.options.limit)
    encoded, skipped = b.encode_prompts(pair, selected, settings.chat)
    bench = _bench_settings(plan, settings, {} if plan.ks else by_strategy)
    return Workload(pair, strategies, encoded, skipped, bench, pair.uses_chat(settings.chat))


def served_workload(plan: BenchPlan, change: SettingsChange) -> Workload:
    """The work of a bench of servers alone: the settings without a model, the prompts as text."""
    settings = resolve_settings(None, change)
    selected = prompt_sets.select_prompts(plan.prompts or [], plan.options.categories, plan.options.limit)
    encoded: list[tuple[BenchPrompt, list[int]]] = [(p, []) for p in selected]
    return Workload(None, [], encoded, [], _bench_settings(plan, settings, {}), bool(change.chat))


def _bench_settings(plan: BenchPlan, settings: Settings, by_strategy: dict[str, Settings]) -> b.BenchSettings:
    options = plan.options
    return b.BenchSettings(
        settings=settings,
        repeats=options.repeats,
        warmup=options.warmup,
        ks=plan.ks,
        trees=plan.trees,
        by_strategy=by_strategy,
    )


def attach(runners: Sequence[EndpointRunner], work: Workload) -> list[EndpointRunner]:
    """The servers still reachable, each given the bench's settings and the prompts' form (templated
    when the local models' are)."""
    live = [r for r in runners if r.error is None]
    for runner in live:
        runner.bench, runner.chat = work.bench, work.chat
    return live


def check_compare_hf(pair: Pair | None, compare_hf: bool) -> None:
    """--compare-hf needs transformers' own model of the target: the torch engine's."""
    if compare_hf and pair is not None and pair.engine != "torch":
        raise UsageError(
            f"--compare-hf runs transformers' own assisted generation, which the {pair.engine} engine "
            "has no model for.",
            "Use --engine torch with --compare-hf, or compare with llama-server through --endpoint.",
        )


def run(
    work: Workload,
    live: Sequence[EndpointRunner],
    compare_hf: bool,
    concurrency: int,
    progress: b.Progress | None = None,
) -> list[b.Measurement]:
    """Every run of the bench; `progress` hears of each stage and run. Transformers' runs (--compare-hf)
    and the servers' (at concurrency 1) are interleaved with specli's, so drift hits all alike; at a
    higher concurrency each server then runs every prompt, that many at a time."""
    pair, bench = work.pair, work.bench
    modes = (
        b.transformers_modes(pair, work.strategies, bench.settings, bench.by_strategy)
        if compare_hf and pair
        else None
    )
    remotes = live if concurrency == 1 else []
    measurements = b.run_bench(
        pair, work.encoded, work.strategies, bench, progress=progress, hf_modes=modes, remotes=remotes
    )
    for runner in live if concurrency > 1 else []:
        runner.run_concurrently([p for p, _ in work.encoded], concurrency, progress)
    return measurements


def bench_report(
    work: Workload,
    measurements: list[b.Measurement],
    runners: Sequence[EndpointRunner],
    dtype: str | None,
    quant: str | None,
    threads: int | str | None,
) -> dict[str, Any]:
    """The report (specli.bench.run.report): the measurements, the servers' part when any were asked,
    and the environment (the --dtype, --quant and --threads given)."""
    env = environment(work.pair, dtype, quant, threads)
    served = served_report(runners) if runners else None
    return b.report(measurements, work.bench, env, None, work.skipped, served=served)


def environment(
    pair: Pair | None, dtype: str | None, quant: str | None, threads: int | str | None
) -> dict[str, Any]:
    """The report's environment: the local machine's and models' (none when no model loaded)."""
    if pair is None:
        return client_environment()
    env = b.environment(pair, dtype, quant)
    env["peak_memory_bytes"] = b.peak_memory_bytes(pair.target.device)
    env["threads_option"] = threads  # env["threads"]: the count torch used
    env["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")
    return env


def write_report(path: str | Path, result: dict[str, Any]) -> None:
    """The report as JSON (--json FILE)."""
    Path(path).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
