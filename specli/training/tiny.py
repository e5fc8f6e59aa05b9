"""Rebuild the embedded `tiny` pair from scratch: corpus -> BPE tokenizer -> LayerSkip target -> distilled
drafter -> safetensors folders + training.json.

    python -m specli.training.tiny --out ./tiny            # the full recipe (~45 min on 2 CPU cores)
    python -m specli.training.tiny --out /tmp/t --quick    # a few steps, for tests

The shipped weights in specli/embedded/ come from `--out specli/embedded` with the defaults.
The toolbox this recipe shares with the others (windows, optimizer, mixed precision, the loop, the
draft model's loss, saving) is common.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from specli.training.bpe import train_tokenizer
from specli.training.common import (
    count_parameters,
    draft_loss,
    encode_stream,
    fit,
    fixed_windows,
    mixed_precision,
    random_windows,
    round_trip_half,
    save_model,
)
from specli.training.corpus import Corpus, load_corpus
from specli.training.layerskip import LayerSkipConfig, depth_logits, layerskip_loss
from specli.wording import count as plural

TARGET_DIR = "tiny-target"
DRAFT_DIR = "tiny-draft"


@dataclass
class Recipe:
    """Every knob of a run; written into training.json."""

    seed: int = 0
    vocab_size: int = 4096
    context: int = 512
    batch_size: int = 8
    target_hidden: int = 256
    target_layers: int = 8
    target_intermediate: int = 704
    target_heads: int = 4
    target_steps: int = 1400
    target_lr: float = 1.5e-3
    exit_layer: int = 3
    early_exit: bool = True
    exit_weights: dict[int, float] = field(default_factory=dict)
    exit_fraction: float = 0.25
    max_layer_dropout: float = 0.1
    draft_hidden: int = 128
    draft_layers: int = 2
    draft_intermediate: int = 384
    draft_heads: int = 4
    draft_steps: int = 1500
    draft_lr: float = 3e-3
    draft_loss: str = "kl"  # kl: distil the target's distributions; ce: the data alone (ablation)
    max_files: int | None = None
    eval_windows: int = 64
    log_every: int = 10

    def layerskip(self) -> LayerSkipConfig:
        if not self.early_exit:
            return LayerSkipConfig()
        return LayerSkipConfig(self.exit_weights, self.exit_fraction, self.max_layer_dropout)


def default_exit_weights(num_layers: int, exit_layer: int) -> dict[int, float]:
    """0.1 on every intermediate exit, 0.4 on the exit layer and the one below it (the self-draft)."""
    weights = {depth: 0.1 for depth in range(1, num_layers)}
    for depth in (exit_layer - 1, exit_layer):
        if 1 <= depth < num_layers:
            weights[depth] = 0.4
    return weights


def quick_recipe() -> Recipe:
    return Recipe(
        vocab_size=512,
        context=128,
        batch_size=4,
        target_steps=30,
        draft_steps=30,
        target_lr=3e-3,
        max_files=40,
        eval_windows=4,
        log_every=5,
    )


# --------------------------------------------------------------------------- models


def llama_config(recipe: Recipe, tokenizer, hidden: int, layers: int, intermediate: int, heads: int):
    from transformers import LlamaConfig

    eos = tokenizer.eos_token_id
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=recipe.context,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )


def build_model(config):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM(config)


def train_target(model, stream: torch.Tensor, recipe: Recipe) -> list[dict]:
    """LayerSkip training of the target; returns the logged loss history."""
    generator = torch.Generator().manual_seed(recipe.seed)
    skip_generator = torch.Generator().manual_seed(recipe.seed + 1)
    config = recipe.layerskip()
    final_depth = len(model.model.layers)

    def step_loss() -> tuple[torch.Tensor, dict[str, Any]]:
        batch = random_windows(stream, recipe.batch_size, recipe.context, generator)
        with mixed_precision():
            loss, parts = layerskip_loss(model, batch, config, skip_generator)
        return loss, {"loss": round(parts[final_depth], 4), "exits": _rounded(parts)}

    return fit(model, "target", recipe.target_steps, recipe.target_lr, recipe.log_every, step_loss)


def distill_draft(draft, target, stream: torch.Tensor, recipe: Recipe) -> list[dict]:
    """Train the drafter on the target's soft labels (KL(p_target || q_draft)), or on the data alone
    (recipe.draft_loss == "ce"); returns the loss history."""
    generator = torch.Generator().manual_seed(recipe.seed + 2)
    target.eval()

    def step_loss() -> tuple[torch.Tensor, dict[str, Any]]:
        window = random_windows(stream, recipe.batch_size, recipe.context, generator)
        return draft_loss(draft, target, window, recipe.draft_loss)

    return fit(draft, "drafter", recipe.draft_steps, recipe.draft_lr, recipe.log_every, step_loss)


def _rounded(parts: dict[int, float]) -> dict[str, float]:
    return {str(k): round(v, 4) for k, v in sorted(parts.items())}


@torch.no_grad()
def evaluate(target, draft, windows: torch.Tensor) -> dict:
    """Validation CE of every exit depth of the target and of the drafter, and greedy agreement rates.

    agreement_* is the share of positions where the argmax equals the full target's argmax: a proxy for
    the per-token greedy acceptance of that drafter.
    """
    num_layers = len(target.model.layers)
    depths = list(range(1, num_layers + 1))
    sums = {d: 0.0 for d in depths}
    agree = {d: 0 for d in depths[:-1]}
    draft_ce = 0.0
    draft_agree = 0
    count = 0
    for row in windows:
        inputs, labels = row[None, :-1], row[None, 1:]
        logits = depth_logits(target, inputs, depths)
        final_argmax = logits[num_layers].argmax(-1)
        for d in depths:
            sums[d] += F.cross_entropy(logits[d][0], labels[0], reduction="sum").item()
            if d < num_layers:
                agree[d] += (logits[d].argmax(-1) == final_argmax).sum().item()
        if draft is not None:
            q = draft(input_ids=inputs).logits.float()
            draft_ce += F.cross_entropy(q[0], labels[0], reduction="sum").item()
            draft_agree += (q.argmax(-1) == final_argmax).sum().item()
        count += labels.numel()
    report = {
        "tokens": count,
        "target_loss": round(sums[num_layers] / count, 4),
        "exit_loss": {str(d): round(sums[d] / count, 4) for d in depths},
        "exit_agreement": {str(d): round(agree[d] / count, 4) for d in depths[:-1]},
    }
    if draft is not None:
        report["draft_loss"] = round(draft_ce / count, 4)
        report["draft_agreement"] = round(draft_agree / count, 4)
    return report


# --------------------------------------------------------------------------- main


def run(out: Path, recipe: Recipe, log=print, target_from: Path | None = None) -> dict:
    """The whole recipe; returns (and writes to out/training.json) what it measured.

    target_from: a folder with a trained target; its tokenizer and weights are reused (drafter only).
    """
    started = time.perf_counter()
    torch.manual_seed(recipe.seed)
    if recipe.early_exit and not recipe.exit_weights:
        recipe.exit_weights = default_exit_weights(recipe.target_layers, recipe.exit_layer)
    corpus: Corpus = load_corpus(max_files=recipe.max_files)
    log(
        f"corpus: {plural(len(corpus.train), 'train file')} ({corpus.train_chars / 1e6:.1f} M chars), "
        f"{plural(len(corpus.validation), 'validation file')} from {corpus.root}"
    )
    if target_from is not None:  # reuse a trained target (and its tokenizer): only the drafter trains
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(target_from)
    else:
        tokenizer = train_tokenizer(corpus.train, recipe.vocab_size)
    train_stream = encode_stream(tokenizer, corpus.train)
    valid_stream = encode_stream(tokenizer, corpus.validation)
    log(
        f"tokenizer: {len(tokenizer)} tokens; train {train_stream.numel():,} tokens, "
        f"validation {valid_stream.numel():,} tokens"
    )
    windows = fixed_windows(valid_stream, recipe.eval_windows, recipe.context)

    if target_from is not None:
        target = AutoModelForCausalLM.from_pretrained(target_from, dtype=torch.float32).eval()
        target_history, target_seconds = [], 0.0
        log(f"target: loaded from {target_from}")
    else:
        target = build_model(
            llama_config(
                recipe,
                tokenizer,
                recipe.target_hidden,
                recipe.target_layers,
                recipe.target_intermediate,
                recipe.target_heads,
            )
        )
        steps = plural(recipe.target_steps, "step")
        log(f"target: {count_parameters(target) / 1e6:.2f} M parameters, {steps}")
        t0 = time.perf_counter()
        target_history = train_target(target, train_stream, recipe)
        target_seconds = time.perf_counter() - t0
        save_model(target, tokenizer, out / TARGET_DIR, dtype=torch.float16)  # the target: float16
        round_trip_half(target, torch.float16)

    report: dict = {
        "recipe": asdict(recipe),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "corpus": {
            "root": str(corpus.root),
            "train_files": len(corpus.train),
            "validation_files": len(corpus.validation),
            "train_tokens": train_stream.numel(),
            "validation_tokens": valid_stream.numel(),
            "validation_names": corpus.validation_names,
        },
        "target": {
            "parameters": count_parameters(target),
            "seconds": round(target_seconds, 1),
            "history": target_history,
        },
    }
    draft = None
    if recipe.draft_steps > 0:
        draft = build_model(
            llama_config(
                recipe,
                tokenizer,
                recipe.draft_hidden,
                recipe.draft_layers,
                recipe.draft_intermediate,
                recipe.draft_heads,
            )
        )
        steps = plural(recipe.draft_steps, "step")
        log(f"drafter: {count_parameters(draft) / 1e6:.2f} M parameters, {steps}")
        t0 = time.perf_counter()
        draft_history = distill_draft(draft, target, train_stream, recipe)
        report["draft"] = {
            "parameters": count_parameters(draft),
            "seconds": round(time.perf_counter() - t0, 1),
            "history": draft_history,
        }
        save_model(draft, tokenizer, out / DRAFT_DIR)
        round_trip_half(draft)
    report["validation"] = evaluate(target, draft, windows)
    report["seconds"] = round(time.perf_counter() - started, 1)
    (out / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    v = report["validation"]
    log(
        f"validation: target loss {v['target_loss']}, exit {recipe.exit_layer} loss "
        f"{v['exit_loss'][str(recipe.exit_layer)]}"
        + (f", drafter loss {v['draft_loss']}, agreement {v['draft_agreement']}" if draft is not None else "")
        + f"; {report['seconds']:.0f} s in all"
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specli.training.tiny",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help="folder to write tiny-target/, tiny-draft/")
    parser.add_argument("--quick", action="store_true", help="a few steps on a small corpus (for tests)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-steps", type=int)
    parser.add_argument("--draft-steps", type=int, help="0 skips the drafter")
    parser.add_argument(
        "--no-early-exit",
        action="store_true",
        help="train the target without early-exit loss and layer dropout (the ablation)",
    )
    parser.add_argument(
        "--draft-loss",
        choices=("kl", "ce"),
        default="kl",
        help="kl: distil the target (default); ce: the data alone (the ablation)",
    )
    parser.add_argument("--target-from", type=Path, help="reuse this trained target; train only the drafter")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    recipe = quick_recipe() if args.quick else Recipe()
    recipe.seed = args.seed
    if args.target_steps is not None:
        recipe.target_steps = args.target_steps
    if args.draft_steps is not None:
        recipe.draft_steps = args.draft_steps
    if args.no_early_exit:
        recipe.early_exit = False
    torch.set_num_threads(max(1, args.threads))
    args.out.mkdir(parents=True, exist_ok=True)
    recipe.draft_loss = args.draft_loss
    run(args.out, recipe, target_from=args.target_from)
    return 0


if __name__ == "__main__":
    sys.exit(main())
