"""Where an EAGLE head's drafting time goes, beside the distilled drafter's (issue 22), on the embedded pair.

    python scripts/eagle_breakdown.py            # greedy, k <= 4, 128 tokens, 12 code prompts, 1 thread
    python scripts/eagle_breakdown.py --head runs/tiny-eagle3-slim

Runs both drafters on the same prompts and prints, per drafter, drafting and verifying time (ms per
drafted token, ms per round) and tokens/s; for the head, the share of each part of a round: the pass
over the accepted tokens' features (`step[n]`), the single chained steps (`step[1]`), the LM head
(`draft_logits`), fc (`fuse`), embeddings and the draft -> target vocabulary map.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch

import specli
from specli.bench import prompts as prompt_sets
from specli.bench import run as b
from specli.drafters.eagle import EagleDrafter
from specli.models.eagle_head import EagleHead


def run(strategy: str, draft: str | None, prompts: int, timed: bool) -> None:
    pair = specli.load(strategy=strategy, draft=draft, device="cpu", threads=None)
    encoded, _ = b.encode_prompts(
        pair,
        prompt_sets.select_prompts(prompt_sets.read_prompts(prompt_sets.set_path("code")), [], prompts // 3),
    )
    settings = pair.settings(max_new_tokens=128, num_draft_tokens=4)
    for _, ids in encoded[:2]:  # warm-up
        pair.generate(prompt_ids=ids, settings=settings)
    spent: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    originals = []

    def wrap(cls, name: str, split=None) -> None:
        fn = getattr(cls, name)
        originals.append((cls, name, fn))

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            label = name + (split(*args) if split else "")
            spent[label] += time.perf_counter() - start
            calls[label] += 1
            return out

        setattr(cls, name, wrapper)

    if timed:
        wrap(EagleDrafter, "_step", lambda self, embeds, hidden: "[1]" if embeds.shape[0] == 1 else "[n]")
        for cls, name in ((EagleHead, "draft_logits"), (EagleHead, "fuse"), (EagleDrafter, "_embeddings"),
                          (EagleDrafter, "_target_logits")):  # fmt: skip
            wrap(cls, name)
    draft = verify = wall = 0.0
    rounds = tokens = drafted = 0
    try:
        for _, ids in encoded:
            start = time.perf_counter()
            result = pair.generate(prompt_ids=ids, settings=settings)
            wall += time.perf_counter() - start
            s = result.stats
            draft, verify, rounds, tokens, drafted = (
                draft + s.draft_time, verify + s.verify_time, rounds + s.rounds, tokens + s.tokens,
                drafted + s.drafted,
            )  # fmt: skip
    finally:
        for cls, name, fn in originals:
            setattr(cls, name, fn)
    name = pair.head_name if strategy == "eagle" else pair.draft_name
    print(
        f"{name}: {tokens / wall:.1f} tok/s, tau {tokens / rounds:.2f}, drafting "
        f"{1000 * draft / drafted:.3f} ms per drafted token ({100 * draft / wall:.0f} % of the time), "
        f"verifying {1000 * verify / rounds:.2f} ms per round ({100 * verify / wall:.0f} %)"
    )
    for label in spent:
        per_call = 1000 * spent[label] / calls[label]
        print(
            f"    {label:16s} {calls[label] / rounds:5.2f} calls/round  {per_call:.3f} ms/call  "
            f"{1000 * spent[label] / rounds:.3f} ms/round"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head", default="embedded:tiny-eagle3")
    parser.add_argument("--prompts", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run("eagle", args.head, args.prompts, timed=True)
    run("draft", None, args.prompts, timed=False)


if __name__ == "__main__":
    main()
