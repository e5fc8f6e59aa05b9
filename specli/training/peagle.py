"""Train a P-EAGLE head for the embedded tiny target: the shipped EAGLE-3 head, given a mask token, a
learned `mask_hidden` and its own token embeddings, learns to draft all k tokens in one forward.

    python -m specli.training.peagle --out specli/embedded        # the shipped recipe (~25 min, 2 cores)
    python -m specli.training.peagle --out /tmp/p --quick          # a few steps, for tests

Head slot t pairs the target's features of x_t with the embedding of x_{t+1} and predicts x_{t+2}. At
inference (docs/design.md §10) the true slots are followed by k-1 placeholders (the mask token's
embedding, fc(mask_hidden)) at the next rope positions; placeholder j predicts d_{j+1}. Training packs
that layout as PARD does (`specli.training.pard.pack`): the true slots, then per anchor t and depth j a
placeholder at position t+j that sees the true slots up to t and its anchor's placeholders before it,
anchors dropped conditionally with depth. Every slot distils the target's distribution at position
slot + 1 (restricted to the draft vocabulary).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from specli.models.eagle_head import EagleHead
from specli.models.head_formats import load_head, save_head
from specli.training.common import (
    encode_stream,
    fit,
    fixed_windows,
    mixed_precision,
    random_windows,
    round_trip_half,
)
from specli.training.corpus import load_corpus
from specli.training.eagle import target_pass
from specli.training.pard import Packed, agreement, pack
from specli.wording import count as plural

PEAGLE_DIR = "tiny-peagle"


@dataclass
class PEagleRecipe:
    """Every knob of the run; written into the head's training.json."""

    seed: int = 0
    steps: int = 1000
    lr: float = 1.5e-3
    batch_size: int = 8
    context: int = 192
    parallel: int = 8  # K: placeholders 1..K-1 after the last true slot
    retain: float = 0.7  # conditional drop: P(keep depth j | kept depth j-1)
    max_files: int | None = None
    eval_windows: int = 32
    log_every: int = 10
    target_autocast: bool = True  # the target's forward under bfloat16 autocast (False: in its own dtype)


def quick_recipe() -> PEagleRecipe:
    return PEagleRecipe(steps=6, batch_size=2, context=48, max_files=40, eval_windows=2)


def rare_token(stream: torch.Tensor, vocab: int) -> int:
    """The least frequent token of the training stream (lowest id on ties): the mask token, whose
    embedding row the head then learns almost alone."""
    counts = torch.bincount(stream, minlength=vocab).float() + torch.arange(vocab) * 1e-6
    return int(counts.argmin())


def make_parallel(head: EagleHead, target, mask_token: int) -> EagleHead:
    """An eagle3 head -> a P-EAGLE head with the same weights, its own copy of the target's embeddings,
    mask_hidden at zero (fc of it starts at fc's bias)."""
    config = replace(head.config, mask_token_id=mask_token, own_embeddings=True)
    parallel = EagleHead(config)
    parallel.load_state_dict(head.state_dict(), strict=False)
    with torch.no_grad():
        parallel.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
    return parallel


def packed_states(
    head: EagleHead, embeds: torch.Tensor, hidden: torch.Tensor, layout: Packed
) -> torch.Tensor:
    """The head over a packed layout: embeds, hidden [B, L, H] -> output states [B, L, H] (every decoder
    layer under the same packed mask, as each layer's cache holds the same positions when drafting)."""
    c, layer = head.config, head.layer
    normed = layer.hidden_norm(hidden)
    residual = normed if c.norm_before_residual else hidden
    x = torch.cat([layer.input_layernorm(embeds), normed], -1)  # [B, L, 2H]
    positions = layout.positions.to(x.device)
    mask = layout.attention().to(x.device)  # [L, L]
    state = layer._finish(residual, _packed_attention(layer, x, positions, mask))
    for deeper in head.layers[1:]:
        attn = _packed_attention(deeper, deeper.input_layernorm(state), positions, mask)
        state = deeper._finish(state, attn)
    return state


def _packed_attention(layer, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One layer's attention over a packed layout: x [B, L, in] -> o_proj output [B, L, H]."""
    c, a = layer.c, layer.self_attn
    b, n, _ = x.shape
    q = a.q_proj(x).view(b, n, c.num_heads, c.head_dim).transpose(1, 2)  # [B, h, L, d]
    k = a.k_proj(x).view(b, n, c.num_kv_heads, c.head_dim).transpose(1, 2)
    v = a.v_proj(x).view(b, n, c.num_kv_heads, c.head_dim).transpose(1, 2)
    q, k = layer.rope(q, positions), layer.rope(k, positions)
    groups = c.num_heads // c.num_kv_heads
    if groups > 1:
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return a.o_proj(out.transpose(1, 2).reshape(b, n, c.num_heads * c.head_dim))


def packed_inputs(head: EagleHead, tokens: torch.Tensor, features: torch.Tensor, layout: Packed):
    """tokens [B, T], features [B, T, F] -> (embeds, hidden) [B, L, H]: true slots t < T-1 read x_{t+1}
    and the features of x_t; placeholders the mask token and fc(mask_hidden)."""
    b, t = tokens.shape
    slots = t - 1
    extra = layout.anchor.numel() - slots
    embed = head.embed_tokens
    mask = tokens.new_full((b, extra), head.config.mask_token_id)
    embeds = embed(torch.cat([tokens[:, 1:], mask], 1))
    true_hidden = head.fuse(features[:, :slots])  # [B, T-1, H]
    hidden = torch.cat([true_hidden, head.placeholders(extra)[None].expand(b, -1, -1)], 1)
    return embeds, hidden


def peagle_loss(
    head: EagleHead, target, window: torch.Tensor, recipe: PEagleRecipe, generator: torch.Generator
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Soft cross-entropy against the target at every packed slot, averaged per depth, then over depths;
    the record's `agree` [per depth]: how often the head's argmax is the target's there."""
    c = head.config
    features, logp = target_pass(target, window, c.aux_layers, recipe.target_autocast)  # [B, T, F], [B, T, V]
    layout = pack(window.shape[1] - 1, recipe.parallel, recipe.retain, generator)
    ids = head.draft_to_target()
    with mixed_precision(window.device.type):
        embeds, hidden = packed_inputs(head, window, features, layout)
        states = packed_states(head, embeds, hidden, layout)  # [B, L, H]
        logits = head.draft_logits(states)
    target_logp = logp[:, layout.positions.to(logp.device) + 1]  # [B, L, V]
    teacher = target_logp.exp()
    if ids is not None:
        teacher = teacher[..., ids]
    student = logits.float().log_softmax(-1)
    loss, record = layout.loss_by_depth(-(teacher * student).sum(-1))  # [B, L] per slot
    with torch.no_grad():
        choice = student.argmax(-1)
        choice = ids[choice] if ids is not None else choice
        hits = (choice == target_logp.argmax(-1)).float().mean(0)  # [L]
    record["agree"] = agreement(layout.hits_by_depth(hits.cpu(), recipe.parallel))
    return loss, record


@torch.no_grad()
def evaluate(
    head: EagleHead, target, windows: torch.Tensor, parallel: int, autocast: bool = True
) -> dict[str, Any]:
    """Per depth: how often the head's argmax equals the target's at that place (every anchor kept)."""
    totals = torch.zeros(2, parallel)
    ids = head.draft_to_target()
    device = head.fc.weight.device
    for row in windows:
        window = row[None, :-1].to(device)
        features, logp = target_pass(target, window, head.config.aux_layers, autocast)
        layout = pack(window.shape[1] - 1, parallel, 1.0, None)
        embeds, hidden = packed_inputs(head, window, features, layout)
        choice = head.draft_logits(packed_states(head, embeds, hidden, layout))[0].argmax(-1)
        if ids is not None:
            choice = ids[choice]
        hits = choice == logp[0, layout.positions.to(device) + 1].argmax(-1)
        totals += layout.hits_by_depth(hits.cpu(), parallel)
    return {"agreement_by_depth": agreement(totals)}


def train_peagle(head: EagleHead, target, tokenizer, recipe: PEagleRecipe, out: Path, log=print) -> dict:
    """Turn an eagle3 `head` into a P-EAGLE head, train it, write it to out/tiny-peagle."""
    torch.manual_seed(recipe.seed)
    corpus = load_corpus(max_files=recipe.max_files)
    train_stream = encode_stream(tokenizer, corpus.train)
    valid_stream = encode_stream(tokenizer, corpus.validation)
    windows = fixed_windows(valid_stream, recipe.eval_windows, recipe.context)
    for p in target.parameters():
        p.requires_grad_(False)
    head = make_parallel(head, target, rare_token(train_stream, head.config.target_vocab_size))
    before = evaluate(head, target, windows, recipe.parallel)
    params = sum(p.numel() for p in head.parameters())
    log(f"peagle: {params / 1e6:.2f} M parameters, {plural(recipe.steps, 'step')}, K={recipe.parallel}")
    generator = torch.Generator().manual_seed(recipe.seed + 21)
    layouts = torch.Generator().manual_seed(recipe.seed + 22)

    def step_loss() -> tuple[torch.Tensor, dict[str, Any]]:
        window = random_windows(train_stream, recipe.batch_size, recipe.context, generator)[:, :-1]
        return peagle_loss(head, target, window, recipe, layouts)

    started = time.perf_counter()
    history = fit(head, "peagle", recipe.steps, recipe.lr, recipe.log_every, step_loss)
    seconds = time.perf_counter() - started
    round_trip_half(head)
    validation = evaluate(head, target, windows, recipe.parallel)
    folder = out / PEAGLE_DIR
    save_head(head, folder, verifier="embedded:tiny-target", speculative_tokens=recipe.parallel)
    report = {
        "recipe": asdict(recipe),
        "config": head.config.to_dict(),
        "parameters": params,
        "seconds": round(seconds, 1),
        "history": history,
        "validation_before": before,
        "validation": validation,
        "torch": torch.__version__,
    }
    (folder / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    log(f"peagle: agreement by depth {validation['agreement_by_depth']}; {seconds:.0f} s")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specli.training.peagle",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help="folder to write tiny-peagle/")
    parser.add_argument("--head", type=Path, help="the eagle3 head to start from (default: embedded)")
    parser.add_argument("--quick", action="store_true", help="a few steps on a small corpus (for tests)")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--parallel", type=int, help="K: drafts per forward it is trained for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specli.models.model_dirs import embedded_model

    torch.set_num_threads(max(1, args.threads))
    folder = embedded_model("tiny-target")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    target = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    head = load_head(args.head or embedded_model("tiny-eagle3"), target.config)
    if head.config.num_layers != 1 or head.config.kind != "eagle3":
        parser.error("--head must be a one-layer EAGLE-3 head (this recipe trains the fusing layer only)")
    recipe = quick_recipe() if args.quick else PEagleRecipe()
    recipe.seed = args.seed
    if args.steps is not None:
        recipe.steps = args.steps
    if args.parallel is not None:
        recipe.parallel = args.parallel
    args.out.mkdir(parents=True, exist_ok=True)
    train_peagle(head, target, tokenizer, recipe, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
