"""What a trained drafter buys, measured as `specli bench` measures it: held-out prompts generated greedy
through specli's engine by plain decoding and by the drafter read back from its folder (and by
--compare-with, another drafter), every drafter at a fixed k so α and τ do not depend on timing.
The drafter is read with the loaders `specli.load` uses (its checks included) and attached
(`Pair.attach`) to a pair of the target already in memory; greedy output must equal plain decoding's,
token for token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from specli.bench.prompts import BenchPrompt
from specli.bench.run import BenchSettings, Measurement, encode_prompts, identity_errors, measure, summarize
from specli.models import head_formats, loading
from specli.models.blockwise_heads import BlockwiseHeads
from specli.models.cached_lm import CachedLM
from specli.models.model_dirs import read_config
from specli.pair import Pair
from specli.settings import SettingsChange
from specli.strategies import Strategy

PLAIN = Strategy.NONE
KEYS = (  # what training.json keeps of bench's metrics for each drafter
    "tokens_per_second",
    "speedup",
    "accept_prob",
    "mean_acceptance_length",
    "acceptance_rate",
    "per_position_acceptance",
    "per_position_accept_prob",
    "num_draft_tokens",
    "tokens",
    "rounds",
    "drafted",
    "accepted",
)


@dataclass(frozen=True)
class Drafter:
    """A drafter to measure: its label in the report, where it is, the pair that holds it and the strategy
    that drafts with it."""

    label: str
    source: str
    pair: Pair
    strategy: str


def is_head(folder: Any) -> bool:
    """Whether a folder holds an EAGLE head (any layout specli reads)."""
    data = read_config(folder)
    return data is not None and head_formats.detect_layout(data) is not None


def drafter(label: str, target: Pair, source: str, allow_pickle: bool = False) -> Drafter:
    """The drafter at `source` (a folder, hub id or embedded:NAME) to measure under `label`: an EAGLE head
    (strategy eagle) or a draft model sharing the target's tokenizer (strategy draft), loaded and checked
    as specli.load loads and checks them, in the target's dtype beside its LM head, and attached to a
    pair of the target in memory."""
    folder = loading.resolve_source(source, allow_pickle=allow_pickle, weights=True)
    model = target.target_model
    device = CachedLM(model).output_device
    dtype = model.get_output_embeddings().weight.dtype
    pair = Pair(
        model, target.tokenizer, strategy=PLAIN, target_name=target.target_name, generation=target.generation
    )
    if is_head(folder):
        config = head_formats.read_head_config(folder, model.config, name=source)
        head_formats.check_head(config, model.config, source, target.target_name)
        head = head_formats.load_head(
            folder, model.config, allow_pickle=allow_pickle, dtype=dtype, device=device, name=source
        )
        pair.attach(source, head=head)
        blockwise = isinstance(head, BlockwiseHeads)
        return Drafter(label, source, pair, Strategy.HEADS if blockwise else Strategy.EAGLE)
    tokenizer = loading.load_tokenizer(folder, name=source)
    loading.check_tokenizers(target.tokenizer, tokenizer, target.target_name, source)
    draft = loading.load_model(folder, device=device, dtype=dtype, allow_pickle=allow_pickle, name=source)
    pair.attach(source, draft_model=draft)
    return Drafter(label, source, pair, Strategy.DRAFT)


def run_measurement(
    plain: Pair,
    drafters: Sequence[Drafter],
    prompts: Sequence[BenchPrompt],
    max_new_tokens: int,
    num_draft_tokens: int | None = None,
    advance: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Every prompt by plain decoding and by each drafter (a warm-up run first, not counted), greedy, each
    drafter at a fixed k: num_draft_tokens, else the k a parallel drafter was made for, else the default.
    Returns the settings, each label's bench metrics (KEYS) and whether every output was plain
    decoding's. advance() after each run."""
    encoded, skipped = encode_prompts(plain, list(prompts))
    runs: list[tuple[str, Pair, str, BenchSettings]] = [
        (PLAIN, plain, PLAIN, _bench(plain, PLAIN, max_new_tokens, None))
    ]
    for d in drafters:
        k = num_draft_tokens or d.pair.parallel_draft_tokens(d.strategy)
        runs.append((d.label, d.pair, d.strategy, _bench(d.pair, d.strategy, max_new_tokens, k)))
    measurements: list[Measurement] = []
    first_prompt, first_ids = encoded[0]
    for _, pair, strategy, bench in runs:  # warm-up
        measure(pair, first_prompt, first_ids, strategy, bench, 0)
        advance()
    for prompt, ids in encoded:
        for label, pair, strategy, bench in runs:
            m = measure(pair, prompt, ids, strategy, bench, 0)
            measurements.append(replace(m, strategy=label))
            advance()
    overall = summarize(measurements, runs[-1][3].settings.num_draft_tokens)["overall"]
    for label, _, _, bench in runs:  # each drafter ran at its own k
        if label in overall:
            overall[label]["num_draft_tokens"] = bench.settings.num_draft_tokens if label != PLAIN else None
    errors = identity_errors(measurements)
    return {
        "prompts": len(encoded),
        "skipped": skipped,
        "max_new_tokens": max_new_tokens,
        "fixed_k": True,
        "greedy": True,
        "threads": torch.get_num_threads(),
        "device": str(plain.target.device),
        "identical": not errors,
        "differences": errors,
        "drafters": {d.label: d.source for d in drafters},
        "results": {
            label: {key: overall[label].get(key) for key in KEYS} for label, *_ in runs if label in overall
        },
    }


def _bench(pair: Pair, strategy: str, max_new_tokens: int, k: int | None) -> BenchSettings:
    change = SettingsChange(
        strategy=strategy, max_new_tokens=max_new_tokens, temperature=0.0, fixed_k=True, num_draft_tokens=k
    )
    return BenchSettings(pair.settings(change), repeats=1, warmup=1)


def summary_lines(report: dict[str, Any]) -> list[str]:
    """One line per drafter: α, τ, per-position acceptance and tokens/s against plain decoding."""
    results = report["results"]
    plain = results.get(PLAIN, {})
    lines = [f"plain decoding: {plain.get('tokens_per_second', 0.0):.1f} tok/s"]
    for label, r in results.items():
        if label == PLAIN:
            continue
        positions = " ".join(f"{p:.2f}" for p in r.get("per_position_acceptance") or [])
        speedup = r.get("speedup")
        lines.append(
            f"{label} (k={r['num_draft_tokens']}): α {r['accept_prob']:.3f}, "
            f"τ {r['mean_acceptance_length']:.2f}, per position [{positions}], "
            f"{r['tokens_per_second']:.1f} tok/s" + (f" ({speedup:.2f}x plain)" if speedup else "")
        )
    if not report["identical"]:
        lines.append("error: output differs from plain decoding: " + "; ".join(report["differences"][:3]))
    return lines
