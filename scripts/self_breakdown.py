"""Where a self-speculation round's time goes (issue 23 §4), on the embedded pair.

    python scripts/self_breakdown.py            # greedy, k <= 4, 128 tokens, 12 code prompts, 1 thread

Times, inside real generations, the target's decoder layers (the draft's layers [0, E) and the verify's
[E, L)), the exit head (final norm + LM head on the draft's hidden state), the masks and rotary tables
(`LayerStack.prepare`), and everything else in the round (sampling, verification, cache rewinds, the
engine). Layers and the head are the arithmetic self must do; the rest is overhead.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

import torch

import specli
from specli.bench import prompts as prompt_sets
from specli.bench import run as b
from specli.models.layer_stack import LayerStack


def main() -> None:
    torch.set_num_threads(1)
    pair = specli.load(strategy="self", device="cpu", threads=None)
    prompts = prompt_sets.select_prompts(prompt_sets.read_prompts(prompt_sets.set_path("code")), [], 4)
    encoded, _ = b.encode_prompts(pair, prompts)
    spent: dict[str, float] = defaultdict(float)

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            spent[name] += time.perf_counter() - start
            return out

        return wrapper

    originals = (LayerStack.layer, LayerStack.logits, LayerStack.prepare)
    settings = pair.settings(max_new_tokens=128, num_draft_tokens=4)
    for _, ids in encoded[:2]:  # warm-up
        pair.generate(prompt_ids=ids, settings=settings)
    LayerStack.layer = timed("decoder layers", LayerStack.layer)
    LayerStack.logits = timed("exit head (norm + LM head)", LayerStack.logits)
    LayerStack.prepare = timed("masks and rotary (prepare)", LayerStack.prepare)
    total, draft, verify, rounds, tokens = 0.0, 0.0, 0.0, 0, 0
    try:
        for _, ids in encoded:
            start = time.perf_counter()
            result = pair.generate(prompt_ids=ids, settings=settings)
            total += time.perf_counter() - start
            draft += result.stats.draft_time
            verify += result.stats.verify_time
            rounds += result.stats.rounds
            tokens += result.stats.tokens
    finally:
        LayerStack.layer, LayerStack.logits, LayerStack.prepare = originals
    shares = {name: round(100 * seconds / total, 1) for name, seconds in spent.items()}
    shares["everything else"] = round(100 - sum(shares.values()), 1)
    print(json.dumps({
        "tokens_per_second": round(tokens / total, 1), "rounds": rounds,
        "ms_per_round": round(1000 * total / rounds, 3),
        "draft_share": round(100 * draft / total, 1), "verify_share": round(100 * verify / total, 1),
        "shares_percent": shares,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
