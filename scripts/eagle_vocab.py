"""The draft-vocabulary trade-off of the tiny EAGLE-3 head: smaller vocabularies make a head step cheaper
(c) and refuse more of the target's tokens (α). Same prompts as scripts/tiny_figures.py.

    python scripts/eagle_vocab.py [--sizes 512,1024,2048] [--prompts 40] [--max-new-tokens 64] [-k 4]

Each size N keeps the N tokens of the shipped head's draft vocabulary that are most frequent in the
training corpus (its LM head rows and d2t cut to them; no retraining), so the sizes compare the same
head. Greedy decoding, measured by specli's bench against plain decoding (identity checked).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

import torch
from tiny_figures import function_prompts

import specli
from specli.bench import prompts as prompt_sets
from specli.bench import run as bench
from specli.models.eagle_head import EagleHead
from specli.models.head_formats import load_head, save_head
from specli.models.model_dirs import embedded_model
from specli.training.common import encode_stream
from specli.training.corpus import load_corpus
from specli.training.eagle import set_vocabulary

KEYS = ("accept_prob", "acceptance_rate", "mean_acceptance_length", "c", "tokens_per_second", "speedup")


def restricted(head: EagleHead, keep: torch.Tensor) -> EagleHead:
    """The head over draft ids `keep` only (ascending draft ids of the original head)."""
    ids = head.draft_to_target()
    ids = torch.arange(head.config.draft_vocab_size) if ids is None else ids
    config = dataclasses.replace(head.config, draft_vocab_size=keep.numel())
    small = EagleHead(config)
    state = {k: v for k, v in head.state_dict().items() if k not in ("lm_head.weight", "d2t", "t2d")}
    small.load_state_dict(state, strict=False)
    with torch.no_grad():
        small.lm_head.weight.copy_(head.lm_head.weight[keep])
    set_vocabulary(small, ids[keep])
    return small.eval()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="512,1024,2048")
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    head = load_head(embedded_model("tiny-eagle3"))
    tokenizer = AutoTokenizer.from_pretrained(embedded_model("tiny-target"))
    counts = torch.bincount(encode_stream(tokenizer, load_corpus().train), minlength=len(tokenizer))
    ids = head.draft_to_target()
    frequency = counts[ids] if ids is not None else counts
    prompts = [
        prompt_sets.BenchPrompt(name, "third-party", text) for name, text in function_prompts(args.prompts)
    ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            keep = frequency.topk(min(size, frequency.numel())).indices.sort().values
            folder = Path(tmp) / f"head-{size}"
            save_head(restricted(head, keep), folder)
            pair = specli.load(strategy="eagle", draft=str(folder), device="cpu")
            settings = bench.BenchSettings(
                pair.settings(max_new_tokens=args.max_new_tokens, num_draft_tokens=args.k)
            )
            encoded, _ = bench.encode_prompts(pair, prompts)
            report = bench.report(bench.run_bench(pair, encoded, ["eagle"], settings), settings, {}, None)
            metrics = report["summary"]["overall"]["eagle"]
            row = {"draft_vocab": size, **{key: metrics[key] for key in KEYS}, "errors": report["errors"]}
            print(json.dumps(row))
            rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
