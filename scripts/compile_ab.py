"""Steady-state tokens/s of the embedded pair, eager against --compile, one process per mode.

    python scripts/compile_ab.py eager       # the drafters' lean steps (the default)
    python scripts/compile_ab.py no-lean     # eager, the drafters through their transformers forward
    python scripts/compile_ab.py compile     # the first time: compiles (about a minute on 2 CPU cores)

Greedy, fixed k = 4, 128 new tokens, the first 4 prompts of each category of the `code` set, one thread.
Every graph is built by `Pair.warm_up` before the clock starts (its time is printed apart); each
strategy runs the prompts twice and the second pass is timed. Run the modes alternately, on a quiet
machine, a few times: docs/data/compile-ab.txt holds the runs docs/performance.md quotes.
"""

from __future__ import annotations

import json
import sys
import time

import torch

import specli
from specli.bench import prompts as prompt_sets
from specli.bench import run as b


def main(mode: str) -> None:
    torch.set_num_threads(1)
    pair = specli.load(
        strategy=("draft", "lookup", "eagle"),
        device="cpu",
        threads=None,
        compile=mode == "compile",
        lean=mode != "no-lean",
    )
    prompts = prompt_sets.select_prompts(prompt_sets.read_prompts(prompt_sets.set_path("code")), [], 4)
    encoded, _ = b.encode_prompts(pair, prompts)
    out: dict[str, dict[str, float]] = {}
    for strategy in ("none", "draft", "lookup", "eagle"):
        settings = pair.settings(strategy=strategy, max_new_tokens=128, num_draft_tokens=4, fixed_k=True)
        runs = b.BenchSettings(settings, warmup=0)
        start = time.perf_counter()
        for _, ids in encoded:
            pair.warm_up(prompt_ids=ids, settings=settings)
        compile_s = time.perf_counter() - start
        tokens, elapsed = 0, 0.0
        for repeat in range(2):
            for prompt, ids in encoded:
                m = b.measure(pair, prompt, ids, strategy, runs, repeat)
                if m.compiled:
                    raise SystemExit(f"{strategy}: a timed run compiled (warm_up missed a shape)")
                if repeat:
                    tokens, elapsed = tokens + m.stats.tokens, elapsed + m.elapsed_s
        out[strategy] = {"tok_s": round(tokens / elapsed, 1), "compile_s": round(compile_s, 1)}
    print(mode, json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("eager", "no-lean", "compile"):
        raise SystemExit("usage: python scripts/compile_ab.py eager|no-lean|compile")
    main(sys.argv[1])
