"""Adapt the embedded tiny drafter to parallel drafting, PARD-style: a mask token joins its vocabulary and
it learns to predict the token j+1 places ahead at the j-th mask after the last real token.

    python -m specli.training.pard --out specli/embedded        # the shipped recipe (~25 min, 2 cores)
    python -m specli.training.pard --out /tmp/p --quick          # a few steps, for tests

At inference (docs/design.md §10) the drafter runs [pending tokens, MASK x (k-1)] in one forward: the
last real token's logits give d_1, the j-th mask's give d_{j+1}. Training packs many such queries into
one sequence: the real window x_0..x_{T-1}, then for anchors t and offsets j = 1..K-1 a mask at rope
position t+j that sees the real tokens up to t and the masks of its own anchor before it (a custom
attention mask). Conditional drop: an anchor keeps its mask at offset j only if it kept the one at j-1,
with probability `retain` each time, so deeper offsets train on fewer anchors (the cost stays ~2T
tokens instead of K·T). Every position distils the target's full distribution at its place: real t
the target at t, mask (t, j) the target at t+j (which predicts x_{t+j+1}).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from specli.models.sources import PARALLEL_K_KEY
from specli.training.common import (
    count_parameters,
    encode_stream,
    fit,
    fixed_windows,
    mixed_precision,
    random_windows,
    round_trip_half,
    save_model,
)
from specli.training.corpus import load_corpus
from specli.wording import count as plural

PARD_DIR = "tiny-pard"
MASK_KEY = "pard_token"  # the config key naming the mask token id (as PARD checkpoints do)


@dataclass
class PardRecipe:
    """Every knob of the run; written into the drafter's training.json."""

    seed: int = 0
    steps: int = 1000
    lr: float = 1.5e-3
    batch_size: int = 8
    context: int = 192
    parallel: int = 8  # K: the drafter is trained to draft up to K tokens in one forward
    retain: float = 0.7  # conditional drop: P(keep offset j | kept offset j-1)
    max_files: int | None = None
    eval_windows: int = 32
    log_every: int = 10
    target_autocast: bool = True  # the target's forward under bfloat16 autocast (False: in its own dtype)


def quick_recipe() -> PardRecipe:
    return PardRecipe(steps=6, batch_size=2, context=48, max_files=40, eval_windows=2)


# --------------------------------------------------------------------------- the packed layout


@dataclass
class Packed:
    """One packed training layout for windows of T real tokens.

    anchor [L], offset [L] (0 for real tokens, j for a mask) per token; positions = anchor + offset.
    """

    anchor: torch.Tensor
    offset: torch.Tensor

    @property
    def positions(self) -> torch.Tensor:
        return self.anchor + self.offset

    def attention(self) -> torch.Tensor:
        """[L, L] bool, True where query i may read key j: real keys up to its anchor, and its own
        anchor's masks up to its offset."""
        a_q, a_k = self.anchor[:, None], self.anchor[None, :]
        o_q, o_k = self.offset[:, None], self.offset[None, :]
        real = (o_k == 0) & (a_k <= a_q)
        own = (a_k == a_q) & (o_k > 0) & (o_k <= o_q)
        return real | own

    def loss_by_depth(self, per_slot: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        """per_slot [B, L] losses -> their mean per depth, then over depths (each depth counts the same,
        however few anchors it kept), and the log record."""
        losses, parts = [], {}
        for j in range(int(self.offset.max()) + 1):
            chosen = self.offset == j
            if chosen.any():
                losses.append(per_slot[:, chosen].mean())
                parts[f"ce{j}"] = round(losses[-1].item(), 4)
        loss = torch.stack(losses).mean()
        return loss, {"loss": round(loss.item(), 4), **parts}

    def hits_by_depth(self, hits: torch.Tensor, depths: int) -> torch.Tensor:
        """hits [L] (1 where a slot's argmax was the target's) -> [2, depths]: hits and slots per depth."""
        out = torch.zeros(2, depths)
        out[0].index_add_(0, self.offset, hits.float())
        out[1].index_add_(0, self.offset, torch.ones_like(hits, dtype=torch.float))
        return out


def agreement(totals: torch.Tensor) -> list[float]:
    """[2, depths] summed hits_by_depth -> the share of hits per depth."""
    return [round(a, 4) for a in (totals[0] / totals[1].clamp(min=1)).tolist()]


def pack(length: int, parallel: int, retain: float, generator: torch.Generator | None) -> Packed:
    """Real tokens 0..length-1, then the kept masks offset by offset. Mask (t, j) needs the target's
    distribution at t+j, so t+j < length. retain=1 keeps every anchor at every offset (evaluation)."""
    anchors = [torch.arange(length)]
    offsets = [torch.zeros(length, dtype=torch.long)]
    kept = torch.ones(length, dtype=torch.bool)
    for j in range(1, parallel):
        if retain < 1:
            kept &= torch.rand(length, generator=generator) < retain
        else:
            kept = kept.clone()
        kept[length - j :] = False
        ids = kept.nonzero().flatten()
        anchors.append(ids)
        offsets.append(torch.full_like(ids, j))
    return Packed(torch.cat(anchors), torch.cat(offsets))


def packed_inputs(window: torch.Tensor, layout: Packed, mask_id: int) -> torch.Tensor:
    """window [B, T] real tokens -> input ids [B, L]: the window, then mask_id at every mask slot."""
    masks = window.new_full((window.shape[0], layout.anchor.numel() - window.shape[1]), mask_id)
    return torch.cat([window, masks], 1)


def parallel_logits(drafter, window: torch.Tensor, layout: Packed, mask_id: int) -> torch.Tensor:
    """The drafter over a packed layout -> logits [B, L, V_drafter]."""
    b = window.shape[0]
    ids = packed_inputs(window, layout, mask_id)
    positions = layout.positions.to(window.device)[None].expand(b, -1)
    attention = layout.attention().to(window.device)[None, None].expand(b, 1, -1, -1)  # [B, 1, L, L]
    return drafter(input_ids=ids, position_ids=positions, attention_mask=attention, use_cache=False).logits


def pard_loss(
    drafter, target, window: torch.Tensor, recipe: PardRecipe, mask_id: int, generator: torch.Generator
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Soft cross-entropy against the target at every packed position, averaged per offset, then over
    offsets (each depth counts the same, however few anchors it kept), over the tokens both models have
    (below the mask id; the target's embedding rows may be more). The record's `agree` [per depth]: how
    often the drafter's argmax is the target's there."""
    layout = pack(window.shape[1], recipe.parallel, recipe.retain, generator)
    device = window.device.type
    with (
        torch.no_grad(),
        mixed_precision(device) if recipe.target_autocast else torch.autocast(device, enabled=False),
    ):
        logits = target(input_ids=window, use_cache=False).logits
    vocab = min(logits.shape[-1], mask_id)
    teacher = logits[..., :vocab].float().softmax(-1)  # [B, T, V]
    with mixed_precision(device):
        logits = parallel_logits(drafter, window, layout, mask_id)  # [B, L, V+1]
    student = logits[..., :vocab].float().log_softmax(-1)
    place = layout.positions.to(window.device)  # [L]: the target position each slot distils
    wanted = teacher[:, place]  # [B, L, V]
    loss, record = layout.loss_by_depth(-(wanted * student).sum(-1))  # [B, L] per slot
    hits = (student.argmax(-1) == wanted.argmax(-1)).float().mean(0)  # [L]
    record["agree"] = agreement(layout.hits_by_depth(hits.cpu(), recipe.parallel))
    return loss, record


@torch.no_grad()
def evaluate(drafter, target, windows: torch.Tensor, parallel: int, mask_id: int) -> dict[str, Any]:
    """Per offset: how often the drafter's argmax equals the target's at that place (every anchor kept);
    offset j is the proxy for accepting d_{j+1} when d_1..d_j were right."""
    totals = torch.zeros(2, parallel)
    device = drafter.get_input_embeddings().weight.device
    for row in windows:
        window = row[None, :-1].to(device)
        layout = pack(window.shape[1], parallel, 1.0, None)
        vocab = min(target.config.vocab_size, mask_id)
        logits = parallel_logits(drafter, window, layout, mask_id)[0, :, :vocab]
        wanted = target(input_ids=window, use_cache=False).logits[0, :, :vocab].argmax(-1)
        hits = logits.argmax(-1) == wanted[layout.positions.to(device)]
        totals += layout.hits_by_depth(hits.cpu(), parallel)
    return {"agreement_by_offset": agreement(totals)}


# --------------------------------------------------------------------------- the drafter


def add_mask_token(drafter, parallel: int) -> int:
    """Grow the drafter's embedding (and tied LM head) by one row for the mask token, started at the
    mean embedding; mark the config as parallel. Returns the mask id."""
    old = drafter.get_input_embeddings().weight.shape[0]
    drafter.resize_token_embeddings(old + 1, mean_resizing=False)
    with torch.no_grad():
        weight = drafter.get_input_embeddings().weight
        weight[old] = weight[:old].mean(0)
    setattr(drafter.config, MASK_KEY, old)
    drafter.config.spd_type = "pard"
    setattr(drafter.config, PARALLEL_K_KEY, parallel)  # drafts per forward it was trained for
    return old


def train_pard(drafter, target, tokenizer, recipe: PardRecipe, out: Path, log=print) -> dict[str, Any]:
    """Adapt `drafter` (a causal LM sharing the target's tokenizer) and write it to out/tiny-pard."""
    torch.manual_seed(recipe.seed)
    corpus = load_corpus(max_files=recipe.max_files)
    train_stream = encode_stream(tokenizer, corpus.train)
    valid_stream = encode_stream(tokenizer, corpus.validation)
    windows = fixed_windows(valid_stream, recipe.eval_windows, recipe.context)
    for p in target.parameters():
        p.requires_grad_(False)
    mask_id = add_mask_token(drafter, recipe.parallel)
    before = evaluate(drafter, target, windows, recipe.parallel, mask_id)
    log(
        f"pard: {count_parameters(drafter) / 1e6:.2f} M parameters, {plural(recipe.steps, 'step')}, "
        f"K={recipe.parallel}"
    )
    generator = torch.Generator().manual_seed(recipe.seed + 11)
    layouts = torch.Generator().manual_seed(recipe.seed + 12)

    def step_loss() -> tuple[torch.Tensor, dict[str, Any]]:
        window = random_windows(train_stream, recipe.batch_size, recipe.context, generator)[:, :-1]
        return pard_loss(drafter, target, window, recipe, mask_id, layouts)

    started = time.perf_counter()
    history = fit(drafter, "pard", recipe.steps, recipe.lr, recipe.log_every, step_loss)
    seconds = time.perf_counter() - started
    round_trip_half(drafter)
    validation = evaluate(drafter, target, windows, recipe.parallel, mask_id)
    folder = out / PARD_DIR
    save_model(drafter, tokenizer, folder)
    report = {
        "recipe": asdict(recipe),
        "mask_token_id": mask_id,
        "parameters": count_parameters(drafter),
        "seconds": round(seconds, 1),
        "history": history,
        "validation_before": before,
        "validation": validation,
        "torch": torch.__version__,
    }
    (folder / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    log(f"pard: agreement by offset {validation['agreement_by_offset']}; {seconds:.0f} s")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specli.training.pard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help="folder to write tiny-pard/")
    parser.add_argument("--target", type=Path, help="the target folder (default: the embedded tiny target)")
    parser.add_argument(
        "--draft", type=Path, help="the drafter to adapt (default: the embedded tiny drafter)"
    )
    parser.add_argument("--quick", action="store_true", help="a few steps on a small corpus (for tests)")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--parallel", type=int, help="K: drafts per forward it is trained for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specli.models.model_dirs import embedded_model

    torch.set_num_threads(max(1, args.threads))
    target_dir = args.target or embedded_model("tiny-target")
    draft_dir = args.draft or embedded_model("tiny-draft")
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    drafter = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32)
    recipe = quick_recipe() if args.quick else PardRecipe()
    recipe.seed = args.seed
    if args.steps is not None:
        recipe.steps = args.steps
    if args.parallel is not None:
        recipe.parallel = args.parallel
    args.out.mkdir(parents=True, exist_ok=True)
    train_pard(drafter, target, tokenizer, recipe, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
