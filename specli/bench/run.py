"""`specli bench`: run prompt sets through several strategies and the plain-decoding baseline of the same
target on the same engine, and measure speed, acceptance and cost (docs/design.md §4). Prints nothing.
The prompts come from specli/bench/prompts.py (the packaged sets, prompt files, categories).

With a k sweep (`BenchSettings.ks`), every strategy runs at each k and is reported as "STRATEGY k=K";
the report's "sweep" section lines up, per strategy, speed, draft and verify time per round and
acceptance per draft position against k (what parallel drafting buys: its draft time barely grows with k).
With a tree sweep (`BenchSettings.trees`), every strategy that drafts trees also runs once per tree size N,
every round a tree of depth k and all N nodes (fixed_k), reported as "STRATEGY tree N" (docs/design.md
§14); a strategy that drafts chains only (self) has no such rows (`tree_sweep_skipped`). Every row and run
says its tree (0 for a chain), tree_width and nodes_per_round; α by position is then α by depth.

Per prompt every strategy starts from fresh drafter state; warm-up runs are not counted; repeats are
interleaved (the order rotates each repeat) so drift hits all strategies alike; times are medians over
repeats. Greedy runs must reproduce the baseline's tokens exactly; a difference is an error.

Servers (`specli bench --endpoint`, specli/bench/endpoint.py) take turns in the same rotation as `Remote`s;
their rows join the summary under their labels, with the serving metrics local rows also carry (time to
first token, per-token and per-chunk latency, and speculation named as `vllm bench serve` names it).
Importing this module imports neither torch nor transformers (a bench of servers alone loads no model).
"""

from __future__ import annotations

import copy
import platform
import resource
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from specli.bench.prompts import BenchPrompt
from specli.engine.counters import SpecCounters
from specli.engine.events import Stats
from specli.errors import UsageError
from specli.version import __version__
from specli.wording import count

if TYPE_CHECKING:
    import torch

    from specli.pair import Pair
    from specli.settings import Settings

BASELINE = "none"
HF_PREFIX = "transformers: "  # interleaved transformers runs are strategies named so
REMOTE_PREFIX = "endpoint: "  # a server's turn in the rotation


class Progress(Protocol):
    """Where bench reports how far it is (render.progress.Counted): a stage of `total` runs (`similar`:
    runs that cost about what the previous stage's did), then one `advance` per run done."""

    def stage(self, description: str, total: int | None = None, similar: bool = False) -> None: ...

    def advance(self, n: int = 1) -> None: ...


class Remote(Protocol):
    """A server measured in the same rotation as the local strategies (specli.bench.endpoint.EndpointRunner):
    `run` sends one prompt (a warm-up run is not recorded) and keeps its own results; a failure sets
    `error` (one line) and the remote is skipped from then on."""

    label: str
    error: str | None

    def run(self, prompt: BenchPrompt, repeat: int, warm_up: bool) -> None: ...


@dataclass(frozen=True)
class BenchSettings:
    """The generation settings every run uses (its strategy field is ignored: each run sets its own, and
    seed + repeat as its seed), how many measured repeats per prompt and strategy, warm-up runs, and the
    k of a sweep."""

    settings: Settings
    repeats: int = 1
    warmup: int = 1
    ks: tuple[int, ...] = ()  # a k sweep: every strategy runs at each of these k (none: the settings' k)
    trees: tuple[int, ...] = ()  # a tree sweep: one more row per strategy that drafts trees and size
    by_strategy: dict[str, Settings] = field(default_factory=dict)  # a strategy's own (its default k)

    def for_strategy(self, strategy: str) -> Settings:
        """The settings `strategy` runs with: its own when resolved apart (lookup's default k is not a
        drafter model's), else the shared ones; the strategy field set."""
        return self.by_strategy.get(strategy, self.settings).replace(strategy=strategy)

    @property
    def base_seed(self) -> int:
        """Repeat r runs with seed base_seed + r (0 when the settings name no seed)."""
        return self.settings.seed if self.settings.seed is not None else 0

    def to_dict(self) -> dict[str, Any]:
        """The report's "settings": flat, the keys older reports had."""
        s = self.settings
        return {
            "max_new_tokens": s.max_new_tokens,
            "num_draft_tokens": s.num_draft_tokens,
            "fixed_k": s.fixed_k,
            "temperature": s.temperature,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "min_p": s.min_p,
            "ignore_eos": s.ignore_eos,
            "seed": self.base_seed,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "exit_layer": s.exit_layer,
            "ngram_min": s.ngram_min,
            "ngram_max": s.ngram_max,
            "sweep_k": list(self.ks),
            "tree": s.tree,
            "tree_width": s.tree_width,
            "sweep_tree": list(self.trees),
            "num_draft_tokens_by_strategy": {
                name: own.num_draft_tokens
                for name, own in self.by_strategy.items()
                if own.num_draft_tokens != s.num_draft_tokens
            },
        }


@dataclass
class Measurement:
    """One generation of one prompt by one strategy: its Stats, and the wall time bench measured around
    it (CUDA synchronised at both ends), which speed is computed from."""

    prompt_id: str
    category: str
    strategy: str
    repeat: int
    elapsed_s: float
    stats: Stats
    output: list[int] = field(repr=False)
    num_draft_tokens: int | None = None  # set in a k sweep: the k this run used
    error: str | None = None  # a transformers mode that failed
    compiled: bool = False  # torch.compile built a graph during the timed run: not steady-state time
    ttft_s: float | None = None  # from the start to the first round that committed tokens
    chunk_gaps: list[float] = field(default_factory=list, repr=False)  # between rounds that committed
    tree: int = 0  # the trees' nodes a round the run drafted (0: a chain, or a strategy drafting nothing)
    tree_width: int = 2
    sweep_tree: int | None = None  # set in a tree sweep: the tree size this row fixed
    engine: str = "torch"  # what evaluated the models (Pair.engine)

    @property
    def label(self) -> str:
        """How reports name the run's variant: the strategy, with its k in a k sweep ("draft k=4") or its
        tree size in a tree sweep ("draft tree 8")."""
        if self.sweep_tree is not None:
            return f"{self.strategy} tree {self.sweep_tree}" if self.sweep_tree else f"{self.strategy} chain"
        if self.num_draft_tokens is None or self.strategy == BASELINE:
            return self.strategy
        return f"{self.strategy} k={self.num_draft_tokens}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON "runs" row (flat, as in older reports)."""
        s = self.stats
        return {
            "prompt_id": self.prompt_id,
            "category": self.category,
            "strategy": self.strategy,
            "engine": self.engine,
            "num_draft_tokens": self.num_draft_tokens,
            "tree": self.tree,
            "tree_width": self.tree_width,
            "nodes_per_round": s.nodes_per_round,
            "repeat": self.repeat,
            "tokens": s.tokens,
            "rounds": s.rounds,
            "drafted": s.drafted,
            "accepted": s.accepted,
            "rejections": s.rejections,
            "elapsed_s": self.elapsed_s,
            "draft_time_s": s.draft_time,
            "verify_time_s": s.verify_time,
            "prefill_time_s": s.prefill_time,
            "position_drafted": list(s.position_drafted),
            "position_accepted": list(s.position_accepted),
            "position_judged": list(s.position_judged),
            "output_tokens": len(self.output),
            "compiled": self.compiled,
        }


# --------------------------------------------------------------------------- running


def measure(
    pair: Pair,
    prompt: BenchPrompt,
    ids: list[int],
    strategy: str,
    bench: BenchSettings,
    repeat: int,
    k: int | None = None,
    tree: int | None = None,
) -> Measurement:
    """Generate once with `strategy` (at exactly k drafts per round when given; with `tree`, a tree of
    exactly that many nodes and the settings' depth every round; else as the settings say) and seed
    base_seed + repeat; clocks read after a CUDA synchronize."""
    settings = bench.for_strategy(strategy).replace(seed=bench.base_seed + repeat)
    if k is not None:  # a sweep measures each k as such: every round drafts k
        settings = settings.replace(num_draft_tokens=k, fixed_k=True)
    if tree:  # a tree sweep: every round the whole tree at full depth
        settings = settings.replace(tree=tree, fixed_k=True)
    elif tree == 0:  # the sweep's chain row: the run's own k settings, without a tree
        settings = settings.replace(tree=0)
    from specli.models.cached_lm import synchronize
    from specli.models.static_cache import compiled_graphs

    stats = Stats()
    output: list[int] = []
    device = pair.target.device
    pair.warm_up(prompt_ids=ids, settings=settings)  # compile (if ever) outside the clock
    pair.forget_prompts()  # every run pays its own prefill (the engine may keep the last one's cells)
    graphs = compiled_graphs()
    synchronize(device)
    start = time.perf_counter()
    commits: list[float] = []  # when each round that committed tokens came (its tokens are on the host)
    for r in pair.stream(prompt_ids=ids, settings=settings):
        stats.observe(r)
        output += r.committed
        if r.committed:
            commits.append(time.perf_counter())
    synchronize(device)
    elapsed = time.perf_counter() - start
    compiled = compiled_graphs() > graphs  # torch built a graph inside the timed run
    return Measurement(
        prompt.id, prompt.category, strategy, repeat, elapsed, stats, output, k, compiled=compiled,
        ttft_s=commits[0] - start if commits else None, chunk_gaps=gaps(commits),
        tree=settings.tree if settings.drafts_tree else 0, tree_width=settings.tree_width, sweep_tree=tree,
        engine=pair.engine,
    )  # fmt: skip


def tree_sweep_skipped(strategies: Sequence[str]) -> list[str]:
    """Of `strategies`, those a tree sweep has no rows for: plain decoding and those that draft chains
    only (self)."""
    from specli.strategies import tree_strategies

    return [s for s in strategies if s not in tree_strategies()]


def tree_sweep_note(strategies: Sequence[str]) -> str | None:
    """One line naming the strategies a tree sweep makes no rows for, and why (None: it skips none)."""
    from specli.strategies import either, entry

    why = [
        f"{s} (it {'drafts chains only' if entry(s).chains_only else 'is plain decoding'})"
        for s in tree_sweep_skipped(strategies)
    ]
    return f"--sweep-tree makes no tree rows for {either(why)}." if why else None


def gaps(times: Sequence[float]) -> list[float]:
    """Differences between successive times."""
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def encode_prompts(
    pair: Pair, prompts: list[BenchPrompt], chat: bool | None = None
) -> tuple[list[tuple[BenchPrompt, list[int]]], list[str]]:
    """(prompt, ids) for prompts that leave room to generate, and a note for each one skipped."""
    encoded, skipped = [], []
    for p in prompts:
        try:
            encoded.append((p, pair.prompt_ids(p.text, chat=chat)))
        except UsageError as e:
            skipped.append(f"prompt {p.id} ({p.category}) skipped: {e.message}")
    if not encoded:
        raise UsageError("no prompt fits the model's context.", skipped[0] if skipped else None)
    return encoded, skipped


def run_bench(
    pair: Pair | None,
    encoded: list[tuple[BenchPrompt, list[int]]],
    strategies: Sequence[str],
    bench: BenchSettings,
    on_prompt: Callable[[BenchPrompt], None] | None = None,
    progress: Progress | None = None,
    hf_modes: dict[str, dict[str, Any]] | None = None,
    remotes: Sequence[Remote] = (),
) -> list[Measurement]:
    """Baseline + strategies on every (prompt, ids), repeats interleaved; returns every measurement.
    In a sweep (bench.ks) every strategy but the baseline runs once per k. `hf_modes` (name -> the
    generate() arguments of a transformers mode) run in the same rotation, as strategies named
    HF_PREFIX + name, so drift hits them alike; a mode that fails is recorded once and dropped.
    `remotes` (servers) take their turns in the rotation too and keep their own results; a remote that
    failed is skipped. Without a pair only the remotes run (the ids are then unused).
    `progress` hears of two stages, warm-up and measuring, and of every run."""
    ks = bench.ks
    order: list[tuple[str, int | None, int | None]] = [(BASELINE, None, None)] if pair is not None else []
    skip_trees = set(tree_sweep_skipped(strategies))
    for s in strategies if pair is not None else ():
        if s != BASELINE:
            order += [(s, k, None) for k in ks] if ks else [(s, None, None)]
            order += [(s, None, n) for n in bench.trees] if s not in skip_trees else []
    order += [(HF_PREFIX + name, None, None) for name in hf_modes or {}]
    by_key = {REMOTE_PREFIX + r.label: r for r in remotes}
    order += [(key, None, None) for key in by_key]
    failed: set[str] = set()

    def run(
        prompt: BenchPrompt,
        ids: list[int],
        strategy: str,
        repeat: int,
        k: int | None,
        tree: int | None,
        warm_up: bool,
    ) -> Measurement | None:
        if strategy in by_key:
            by_key[strategy].run(prompt, repeat, warm_up)
            if by_key[strategy].error:
                failed.add(strategy)
            return None
        assert pair is not None
        if not strategy.startswith(HF_PREFIX):
            return measure(pair, prompt, ids, strategy, bench, repeat, k, tree)
        name = strategy[len(HF_PREFIX) :]
        seed = bench.base_seed + repeat
        try:
            output, seconds = transformers_generate(pair, ids, hf_modes[name], bench.settings, seed)
        except Exception as e:  # a mode transformers refuses for this model: report, do not abort
            failed.add(strategy)
            error = _error_text(e)
            return Measurement(prompt.id, prompt.category, strategy, repeat, 0.0, Stats(), [], error=error)
        stats = Stats(rounds=len(output), tokens=len(output))
        return Measurement(prompt.id, prompt.category, strategy, repeat, seconds, stats, output)

    measurements: list[Measurement] = []
    if not order or not encoded:
        return measurements
    if progress and bench.warmup:
        progress.stage("warm-up (not counted)", bench.warmup * len(order))
    for _ in range(bench.warmup):
        for strategy, k, tree in order:
            if strategy not in failed:
                done = run(encoded[0][0], encoded[0][1], strategy, 0, k, tree, warm_up=True)
                if done is not None and done.error:
                    measurements.append(done)
            if progress:
                progress.advance()
    if progress:
        progress.stage(
            f"measuring {count(len(encoded), 'prompt')} × "
            f"{_runs_words(order, hf_modes, by_key, ks or bench.trees)} × {count(bench.repeats, 'repeat')}",
            len(encoded) * bench.repeats * len(order),
            similar=True,
        )
    for prompt, ids in encoded:
        for repeat in range(bench.repeats):
            shift = repeat % len(order)
            for strategy, k, tree in order[shift:] + order[:shift]:
                if strategy not in failed:
                    done = run(prompt, ids, strategy, repeat, k, tree, warm_up=False)
                    if done is not None:
                        measurements.append(done)
                if progress:
                    progress.advance()
        if on_prompt:
            on_prompt(prompt)
    return measurements


def _runs_words(
    order: list[Any], hf_modes: dict[str, Any] | None, remotes: dict[str, Remote], sweeps: Any
) -> str:
    """'4 strategies', '3 variants (+ 4 transformers modes)', '2 strategies (+ 1 endpoint)', '2 endpoints'."""
    ours = len(order) - len(hf_modes or {}) - len(remotes)
    extra = []
    if hf_modes:
        extra.append(count(len(hf_modes), "transformers mode"))
    if remotes:
        extra.append(count(len(remotes), "endpoint"))
    if not ours:
        return " + ".join(extra)
    words = count(ours, "strategy", "strategies") if not sweeps else count(ours, "variant")
    return words + (f" (+ {', '.join(extra)})" if extra else "")


def identity_errors(measurements: list[Measurement]) -> list[str]:
    """Greedy: every strategy's tokens must equal the baseline's for the same prompt."""
    base = {(m.prompt_id, m.repeat): m.output for m in measurements if m.strategy == BASELINE}
    errors = []
    for m in measurements:
        expected = base.get((m.prompt_id, m.repeat))
        if m.strategy != BASELINE and expected is not None and m.output != expected:
            cut = next((i for i, (a, b) in enumerate(zip(m.output, expected, strict=False)) if a != b), None)
            where = f"token {cut}" if cut is not None else f"length {len(m.output)} vs {len(expected)}"
            errors.append(f"prompt {m.prompt_id}: '{m.label}' differs from plain decoding at {where}")
    return errors


# --------------------------------------------------------------------------- summaries


def _median_runs(runs: list[Measurement]) -> Measurement:
    """The run with the median elapsed time among one prompt's repeats."""
    ordered = sorted(runs, key=lambda m: m.elapsed_s)
    return ordered[(len(ordered) - 1) // 2]


def _total(stats: list[Stats]) -> Stats:
    """The counts and times of several runs added up (elapsed: bench keeps wall time apart)."""
    return sum(stats, Stats())


def _strategy_metrics(strategy: str, runs: list[Measurement]) -> dict[str, Any]:
    """Speed from each prompt's median run; acceptance from every run (repeats included)."""
    by_prompt: dict[str, list[Measurement]] = {}
    for m in runs:
        by_prompt.setdefault(m.prompt_id, []).append(m)
    medians = [_median_runs(v) for v in by_prompt.values()]
    median = _total([m.stats for m in medians])
    every = _total([m.stats for m in runs])
    elapsed = sum(m.elapsed_s for m in medians)
    tokens, draft_t, verify_t = median.tokens, median.draft_time, median.verify_time
    return {
        "strategy": strategy,
        "prompts": len(medians),
        "tokens": tokens,
        "rounds": median.rounds,
        "drafted": median.drafted,
        "accepted": median.accepted,
        "rejections": median.rejections,
        "mean_k": every.drafted / every.rounds if every.rounds else 0.0,
        "nodes_per_round": every.nodes_per_round,
        "acceptance_rate": every.acceptance_rate,
        "accept_prob": every.accept_prob,
        "mean_acceptance_length": every.mean_acceptance_length,
        "tokens_per_second": tokens / elapsed if elapsed else 0.0,
        "elapsed_s": elapsed,
        "draft_time_s": draft_t,
        "verify_time_s": verify_t,
        "prefill_time_s": median.prefill_time,
        "other_time_s": max(0.0, elapsed - draft_t - verify_t - median.prefill_time),
        "per_position_acceptance": every.per_position_acceptance,
        "per_position_accept_prob": every.per_position_accept_prob,
        "expected_tokens_per_round": every.expected_tokens_per_round,
        "compiled_runs": sum(m.compiled for m in runs),
        **latency_metrics(
            [m.ttft_s for m in runs if m.ttft_s is not None],
            [t for m in runs if (t := _tpot(m)) is not None],
            [g for m in runs for g in m.chunk_gaps],
        ),
        **{
            key: value  # acceptance_rate is there already (the same figure; 0.0 when nothing was drafted)
            for key, value in speculation_metrics(every).items()
            if key != "acceptance_rate"
        },
    }


def _tpot(m: Measurement) -> float | None:
    """Seconds per output token after the first (None for a run of fewer than 2 tokens)."""
    tokens = len(m.output)
    return (m.elapsed_s - m.ttft_s) / (tokens - 1) if m.ttft_s is not None and tokens > 1 else None


def _ms(values: Sequence[float], how: Callable[[Sequence[float]], float]) -> float | None:
    return 1000 * how(values) if values else None


def latency_metrics(
    ttfts: Sequence[float], tpots: Sequence[float], chunk_gaps: Sequence[float]
) -> dict[str, float | None]:
    """Latencies in milliseconds as `vllm bench serve` reports them (None without values): TTFT, from
    the start to the first token; TPOT, (end − first token) / (tokens − 1) per run; ITL, the gaps
    between successive chunks of tokens (a speculative round's tokens arrive in one chunk)."""
    return {
        "mean_ttft_ms": _ms(ttfts, statistics.fmean),
        "median_ttft_ms": _ms(ttfts, statistics.median),
        "mean_tpot_ms": _ms(tpots, statistics.fmean),
        "median_tpot_ms": _ms(tpots, statistics.median),
        "mean_itl_ms": _ms(chunk_gaps, statistics.fmean),
        "median_itl_ms": _ms(chunk_gaps, statistics.median),
    }


def speculation_metrics(counters: SpecCounters) -> dict[str, Any]:
    """The speculation figures `vllm bench serve` prints, under its names, from the counters (a local
    run's `Stats` or what a server reported; None where a count is not known or its denominator is 0):
    drafts (rounds that drafted), draft tokens, accepted tokens, and the counters' acceptance rate,
    acceptance length and per-position acceptance rate (engine/counters.py)."""
    c = counters
    return {
        "drafts": c.drafts,
        "draft_tokens": c.drafted,
        "accepted_tokens": c.accepted,
        "acceptance_rate": c.acceptance_rate,  # a local row's is Stats' (0.0 when nothing was drafted)
        "acceptance_length": c.acceptance_length,
        "accepted_per_position": list(c.position_accepted) if c.position_accepted is not None else None,
        "per_position_acceptance_rate": c.per_position_acceptance_rate,
    }


def _costs(metrics: dict[str, Any], base: dict[str, Any] | None) -> dict[str, float | None]:
    """speedup, c and v in plain target steps, the bound and the efficiency (speedup / bound).

    The bound is Leviathan et al.'s E(α,k)/(k·c + v) over the rounds as drafted: mean E(α, k_round)
    (each round at its own drafted k; α = accept_prob, the per-judged-draft probability E needs) over
    mean k · c + v. At a fixed k it is E(α,k)/(k·c + v). No efficiency for a row whose timed runs
    compiled something (their time is not the steady state's)."""
    speedup = (
        metrics["tokens_per_second"] / base["tokens_per_second"]
        if base and base["tokens_per_second"]
        else None
    )
    if base is None or metrics is base or not base["tokens"]:
        return {"speedup": speedup, "c": None, "v": None, "bound": None, "efficiency": None}
    step = base["elapsed_s"] / base["tokens"]  # seconds per plain target step
    c = metrics["draft_time_s"] / metrics["drafted"] / step if metrics["drafted"] else 0.0
    v = metrics["verify_time_s"] / metrics["rounds"] / step if metrics["rounds"] else 0.0
    cost = (metrics["drafted"] / metrics["rounds"] if metrics["rounds"] else 0.0) * c + v  # per round
    bound = metrics["expected_tokens_per_round"] / cost if cost > 0 else None
    steady = not metrics.get("compiled_runs") and not base.get("compiled_runs")
    efficiency = speedup / bound if bound and speedup and steady else None
    return {"speedup": speedup, "c": c, "v": v, "bound": bound, "efficiency": efficiency}


def summarize(measurements: list[Measurement], k: int) -> dict[str, dict[str, dict[str, Any]]]:
    """{category or "overall": {label: metrics}} with docs/design.md §4 definitions; a label is the
    strategy, or "STRATEGY k=K" in a k sweep (k: the runs' own, else the settings'), or "STRATEGY tree N"
    in a tree sweep; each row says its tree (0: a chain), tree_width and nodes_per_round."""
    groups: dict[str, list[Measurement]] = {}
    for m in measurements:
        groups.setdefault(m.category, []).append(m)
    groups["overall"] = list(measurements)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for category, rows in groups.items():
        labels = list(dict.fromkeys(m.label for m in rows))
        per: dict[str, dict[str, Any]] = {}
        for label in labels:
            runs = [m for m in rows if m.label == label]
            per[label] = _strategy_metrics(runs[0].strategy, runs)
            per[label]["num_draft_tokens"] = runs[0].num_draft_tokens or k
            per[label]["tree"] = runs[0].tree
            per[label]["tree_width"] = runs[0].tree_width
        base = per.get(BASELINE)
        for metrics in per.values():
            metrics.update(_costs(metrics, base))
        out[category] = per
    return out


def sweep(overall: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The summary's "overall" -> {strategy: one row per k, ascending}: tok/s, speedup, draft and verify
    milliseconds per round (and draft time relative to the smallest k), τ, α and α per draft position.
    Empty when the runs are not a k sweep (a k sweep's variants are labelled "STRATEGY k=K")."""
    out: dict[str, list[dict[str, Any]]] = {}
    for label, metrics in overall.items():
        if label != f"{metrics['strategy']} k={metrics['num_draft_tokens']}":  # the baseline, a tree row, ...
            continue
        rounds = metrics["rounds"] or 1
        out.setdefault(metrics["strategy"], []).append(
            {
                "k": metrics["num_draft_tokens"],
                "tokens_per_second": metrics["tokens_per_second"],
                "speedup": metrics["speedup"],
                "draft_ms_per_round": 1000 * metrics["draft_time_s"] / rounds,
                "verify_ms_per_round": 1000 * metrics["verify_time_s"] / rounds,
                "mean_acceptance_length": metrics["mean_acceptance_length"],
                "accept_prob": metrics["accept_prob"],
                "per_position_accept_prob": metrics["per_position_accept_prob"],
            }
        )
    for rows in out.values():
        rows.sort(key=lambda row: row["k"])
        first = rows[0]["draft_ms_per_round"] or 1.0
        for row in rows:
            row["draft_cost_vs_first"] = row["draft_ms_per_round"] / first
    return out


def peak_memory_bytes(device: torch.device) -> int:
    """Peak GPU memory allocated (CUDA), else the process's peak resident memory."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else the platform's processor string: speeds are
    compared within a machine."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment(pair: Pair, dtype: str | None, quant: str | None) -> dict[str, Any]:
    import torch
    import transformers

    device = pair.target.device
    return {
        "specli": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "cpu_model": cpu_model(),
        "dtype": pair.weights_dtype,
        "engine": pair.engine,
        "engine_detail": pair.describe_engine(),
        "dtype_option": dtype,
        "quantization": quant or "none",
        "threads": torch.get_num_threads(),
        "target": pair.target_name,
        "draft": pair.draft_name,
        "compile": bool(getattr(pair, "compile", False)),
        "drafter_steps": drafter_steps(pair),
    }


def drafter_steps(pair: Pair) -> dict[str, str]:
    """How each loaded drafter model or head steps: {"draft" | "eagle": "lean" | "compiled" |
    "transformers (why)"} (Pair.drafter_step), for the ones the pair has."""
    return {s: step for s in ("draft", "eagle") if (step := pair.drafter_step(s)) is not None}


def report(
    measurements: list[Measurement],
    bench: BenchSettings,
    env: dict[str, Any],
    hf: dict[str, Any] | None,
    skipped: list[str] | None = None,
    served: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything a later comparison needs: settings, environment, summaries, per-prompt runs, errors.
    `hf`: transformers' results when they ran apart; interleaved runs among `measurements` are summed up
    here instead (`transformers_results`). `served`: the servers' part (specli.bench.endpoint.served_report):
    their rows join the summary under their labels, their errors the errors, and the report gains
    "endpoints" and "endpoint_runs" (only then: a local bench's report keeps its keys)."""
    ours = [m for m in measurements if not m.strategy.startswith(HF_PREFIX)]
    errors = identity_errors(ours) if bench.settings.greedy else []
    if hf is None and len(ours) < len(measurements):
        hf = transformers_results(measurements)
    summary = summarize(ours, bench.settings.num_draft_tokens)
    out = {
        "settings": bench.to_dict(),
        "environment": env,
        "summary": summary,
        "sweep": sweep(summary["overall"]),
        "errors": errors,
        "skipped": skipped or [],
        "transformers": hf,
        "runs": [m.to_dict() for m in ours],
    }
    if served is not None:
        out["summary"] = merge_summaries(summary, served["summary"])
        out["errors"] = errors + served["errors"]
        out["endpoints"] = served["endpoints"]
        out["endpoint_runs"] = served["runs"]
    return out


def merge_summaries(
    local: dict[str, dict[str, dict[str, Any]]], served: dict[str, dict[str, dict[str, Any]]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Both summaries' rows in one {category: {name: metrics}}: local rows first in each category,
    categories in order of first appearance, "overall" last."""
    names = [c for c in [*local, *served] if c != "overall"]
    return {
        category: {**local.get(category, {}), **served.get(category, {})}
        for category in [*dict.fromkeys(names), "overall"]
    }


# --------------------------------------------------------------------------- transformers, for comparison


TRANSFORMERS_DOCS_LOOKUP_TOKENS = 10  # prompt_lookup_num_tokens in transformers' generation docs
# prompt_lookup_num_tokens as users of transformers' prompt lookup commonly set it (its docs' examples use
# 10, its own benchmarks and most guides 10-16): a mode of its own where specli's lookup k differs
TRANSFORMERS_LOOKUP_TOKENS = 16
# the longest n-gram transformers' prompt lookup matches beside specli's lookup: specli's --ngram-max up
# to this (transformers tries every size from it down to 1 at every step, scanning the whole text each
# time, and copies after the earliest occurrence, so a 32-token bound only slows it down)
TRANSFORMERS_LOOKUP_NGRAM = 3


def transformers_modes(
    pair: Pair, strategies: Sequence[str], settings: Settings, by_strategy: dict[str, Settings] | None = None
) -> dict[str, dict[str, Any]]:
    """transformers generate() settings that correspond to specli's strategies (each at the same most
    drafts per round as that strategy, constant schedule, the same n-gram size and exit layer), and
    transformers out of the box beside them (its assisted defaults, prompt lookup at 16 tokens and as its
    docs show it, early exit at its default schedule). by_strategy: a strategy's own settings (its k)."""
    own = by_strategy or {}
    modes: dict[str, dict[str, Any]] = {"plain": {}}
    if "draft" in strategies and pair.draft_model is not None:
        modes["assisted"] = {
            "assistant_model": pair.draft_model,
            "num_assistant_tokens": own.get("draft", settings).num_draft_tokens,
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0,
        }
        modes["assisted (transformers defaults)"] = {"assistant_model": pair.draft_model}
    if "lookup" in strategies:
        lookup = own.get("lookup", settings)
        modes["prompt lookup"] = {
            "prompt_lookup_num_tokens": lookup.num_draft_tokens,
            "max_matching_ngram_size": min(lookup.ngram_max, TRANSFORMERS_LOOKUP_NGRAM),
        }
        if lookup.num_draft_tokens != TRANSFORMERS_LOOKUP_TOKENS:
            modes[f"prompt lookup ({TRANSFORMERS_LOOKUP_TOKENS} tokens)"] = {
                "prompt_lookup_num_tokens": TRANSFORMERS_LOOKUP_TOKENS,
                "max_matching_ngram_size": min(lookup.ngram_max, TRANSFORMERS_LOOKUP_NGRAM),
            }
        if lookup.num_draft_tokens != TRANSFORMERS_DOCS_LOOKUP_TOKENS:
            modes[f"prompt lookup (transformers docs: {TRANSFORMERS_DOCS_LOOKUP_TOKENS} tokens)"] = {
                "prompt_lookup_num_tokens": TRANSFORMERS_DOCS_LOOKUP_TOKENS
            }
    if "self" in strategies:  # Pair.settings filled the model's default exit layer
        early = own.get("self", settings)
        modes["early exit"] = {
            "assistant_early_exit": early.exit_layer,
            "num_assistant_tokens": early.num_draft_tokens,
            "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0,
        }
        modes["early exit (transformers defaults)"] = {"assistant_early_exit": early.exit_layer}
    return modes


def transformers_generate(
    pair: Pair, prompt_ids: list[int], extra: dict[str, Any], settings: Settings, seed: int
) -> tuple[list[int], float]:
    """One transformers generate() in a mode (`extra`: its keyword arguments) with the bench's settings:
    max_new_tokens (EOS not stopping it under ignore_eos), and when sampling temperature, top-k, top-p
    and min-p as set, seeded -> (new token ids, seconds, CUDA synchronised at both ends)."""
    import torch

    from specli.models.cached_lm import synchronize

    device = pair.target.device
    ids = torch.tensor([prompt_ids], device=device)
    asked: dict[str, Any] = {}  # the settings transformers is told beyond its defaults
    if not settings.greedy:
        asked = dict(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p)
        asked |= {"min_p": settings.min_p} if settings.min_p else {}
    if settings.ignore_eos:
        asked["eos_token_id"] = None  # transformers 5: no EOS ends the generation
    torch.manual_seed(seed)
    kwargs = dict(
        attention_mask=torch.ones_like(ids),
        max_new_tokens=settings.max_new_tokens,
        do_sample=not settings.greedy,
        pad_token_id=pair.tokenizer.pad_token_id or (sorted(pair.eos_ids) or [0])[0],
        **asked,
        **extra,
    )
    early_exit = "assistant_early_exit" in extra  # the target drafts for itself
    drafter_model = extra.get("assistant_model") or (pair.target_model if early_exit else None)
    drafting = {key: kwargs.pop(key) for key in ASSISTANT_CONFIG_KEYS if key in kwargs}
    with _assistant_config(drafter_model, drafting):
        synchronize(device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = pair.target_model.generate(ids, **kwargs)
        synchronize(device)
        seconds = time.perf_counter() - start
    return out[0, ids.shape[1] :].tolist(), seconds


# transformers 5.24's assisted and early-exit generation read these from the drafting model's own
# generation_config (AssistedCandidateGenerator), not from generate()'s arguments, which it ignores
ASSISTANT_CONFIG_KEYS = (
    "num_assistant_tokens",
    "num_assistant_tokens_schedule",
    "assistant_confidence_threshold",
)


@contextmanager
def _assistant_config(model: Any, values: dict[str, Any]) -> Iterator[None]:
    """`values` set on `model.generation_config` for one generate() (the model that drafts: the
    assistant, or the target itself for early exit), and its config restored after, so that no mode
    leaks its schedule into the next (a heuristic schedule also rewrites it during a run)."""
    if model is None:
        yield
        return
    saved = copy.deepcopy(model.generation_config)
    try:
        for key, value in values.items():
            setattr(model.generation_config, key, value)
        yield
    finally:
        model.generation_config = saved


def run_transformers(
    pair: Pair,
    encoded: list[tuple[BenchPrompt, list[int]]],
    strategies: Sequence[str],
    bench: BenchSettings,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """tokens/s of transformers' own generate() in each mode over the same prompts (median of repeats),
    mode after mode (`run_bench(..., hf_modes=)` interleaves them with specli's runs instead).
    `progress` hears of one stage and of every generate() call (a mode that fails counts as done)."""
    results: dict[str, Any] = {}
    modes = transformers_modes(pair, strategies, bench.settings, bench.by_strategy)
    runs_per_mode = len(encoded) * max(1, bench.repeats)
    if progress:
        progress.stage(f"transformers generate(), {count(len(modes), 'mode')}", len(modes) * runs_per_mode)
    for name, extra in modes.items():
        tokens = 0
        elapsed = 0.0
        done = 0
        try:
            for _, prompt_ids in encoded:
                times = []
                for repeat in range(max(1, bench.repeats)):
                    new, seconds = transformers_generate(
                        pair, prompt_ids, extra, bench.settings, bench.base_seed + repeat
                    )
                    times.append(seconds)
                    done += 1
                    if progress:
                        progress.advance()
                tokens += len(new)
                elapsed += statistics.median(times)
            results[name] = {"tokens": tokens, "elapsed_s": elapsed, "tokens_per_second": tokens / elapsed}
        except Exception as e:  # a mode transformers refuses for this model: report, do not abort the bench
            results[name] = {"error": _error_text(e)}
            if progress:
                progress.advance(runs_per_mode - done)
    return results


def _error_text(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:300]


def transformers_results(measurements: list[Measurement]) -> dict[str, Any]:
    """The interleaved transformers runs (strategy HF_PREFIX + mode) -> {mode: tokens, elapsed_s (sum
    of each prompt's median), tokens_per_second, by_category: {category: the same three}} or
    {mode: {"error": ...}}."""
    results: dict[str, Any] = {}
    for m in measurements:
        if m.strategy.startswith(HF_PREFIX):
            results.setdefault(m.strategy[len(HF_PREFIX) :], []).append(m)
    out: dict[str, Any] = {}
    for name, runs in results.items():
        failed = next((m.error for m in runs if m.error), None)
        if failed:
            out[name] = {"error": failed}
            continue
        by_prompt: dict[str, list[Measurement]] = {}
        for m in runs:
            by_prompt.setdefault(m.prompt_id, []).append(m)
        medians = [_median_runs(v) for v in by_prompt.values()]
        out[name] = _speed(medians)
        categories = dict.fromkeys(m.category for m in medians)
        out[name]["by_category"] = {c: _speed([m for m in medians if m.category == c]) for c in categories}
    return out


def _speed(runs: list[Measurement]) -> dict[str, Any]:
    tokens = sum(len(m.output) for m in runs)
    elapsed = sum(m.elapsed_s for m in runs)
    return {"tokens": tokens, "elapsed_s": elapsed, "tokens_per_second": tokens / elapsed}
