"""Train EAGLE heads for the embedded tiny target: EAGLE-3 (fused low/mid/high features, no feature
regression, training-time test, reduced draft vocabulary) and EAGLE-1 (top feature, feature regression
+ token loss) -- written in the `speculators` layout that `specli.models.head_formats` loads.

    python -m specli.training.eagle --out specli/embedded            # both heads (~40 min on 2 cores)
    python -m specli.training.eagle --out /tmp/h --quick              # a few steps, for tests
    python -m specli.training.eagle --out /tmp/h --kind eagle3 --draft-vocab 1024

Training-time test (EAGLE-3): the head is unrolled over its own outputs for `ttt_steps` steps. At
step j, slot t reads its own step j-1 state and the embedding of x_{t+1+j} at rope position t+j, and
attends to the step-0 keys of positions <= t plus its own keys of steps 1..j -- exactly what it sees when
it drafts the (j+1)-th token after position t. Every step is distilled on the target's full
distribution at that position (restricted to the draft vocabulary), weighted 0.8^j.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from specli.errors import UsageError
from specli.models.eagle_head import EagleHead, HeadConfig, default_aux_layers, init_weights
from specli.models.head_formats import save_head
from specli.training.common import (
    encode_stream,
    fit,
    fixed_windows,
    mixed_precision,
    random_windows,
    round_trip_half,
)
from specli.training.corpus import load_corpus
from specli.wording import count as plural

HEAD_DIRS = {"eagle3": "tiny-eagle3", "eagle1": "tiny-eagle1"}


@dataclass
class HeadRecipe:
    """Every knob of a head's run; written into the head's training.json."""

    kind: str = "eagle3"
    seed: int = 0
    steps: int = 1200
    lr: float = 2e-3
    batch_size: int = 8
    context: int = 128
    ttt_steps: int = 3  # eagle1 trains one step (EAGLE-1 has no training-time test; noise instead)
    step_decay: float = 0.8
    draft_vocab: int = 2048  # eagle3 only; eagle1 drafts through the target's LM head
    intermediate: int = 704
    regression_weight: float = 1.0  # eagle1: smooth-L1 on the next feature
    token_weight: float = 0.1  # eagle1: distillation through the target's LM head
    feature_noise: float = 0.05  # eagle1: relative Gaussian noise on the input features
    max_files: int | None = None
    eval_windows: int = 32
    log_every: int = 10
    target_autocast: bool = True  # the target's forward under bfloat16 autocast (False: in its own dtype)


def default_recipe(kind: str) -> HeadRecipe:
    """The recipes of the shipped heads: EAGLE-3 1200 steps with training-time test; EAGLE-1 800 steps."""
    if kind == "eagle3":
        return HeadRecipe(kind=kind, steps=1200, ttt_steps=3)
    return HeadRecipe(kind=kind, steps=800, ttt_steps=1)


def quick_recipe(kind: str) -> HeadRecipe:
    return HeadRecipe(
        kind=kind,
        steps=6,
        batch_size=2,
        context=64,
        ttt_steps=3 if kind == "eagle3" else 1,
        draft_vocab=256,
        max_files=80,
        eval_windows=2,
    )


# --------------------------------------------------------------------------- the target's side


def head_config(
    target,
    kind: str,
    draft_vocab: int,
    intermediate: int | None,
    layers: int = 1,
    aux_layers: Sequence[int] | None = None,
) -> HeadConfig:
    """A head shaped for `target` (a LlamaForCausalLM-like model)."""
    vocab = target.get_output_embeddings().weight.shape[0]
    return head_config_for(target.config, vocab, kind, draft_vocab, intermediate, layers, aux_layers)


def head_config_for(
    config,
    vocab: int,
    kind: str,
    draft_vocab: int,
    intermediate: int | None = None,
    layers: int = 1,
    aux_layers: Sequence[int] | None = None,
) -> HeadConfig:
    """A head shaped for a target of this transformers config whose LM head has `vocab` rows, from the
    config alone (the memory planner runs it before any weights load). intermediate=None: the target's
    MLP width; layers: the head's decoder layers (eagle3; eagle1 has one); aux_layers (eagle3): the
    output_hidden_states indices it reads, 1..L (None: EAGLE-3's 2, L//2, L-3). A scaled rotary
    embedding (Llama 3's) is the head's too: it reads the target's positions."""
    c = getattr(config, "text_config", None) or config
    depth = c.num_hidden_layers
    if aux_layers is not None and kind == "eagle3":
        check_aux_layers(aux_layers, depth)
    heads = c.num_attention_heads
    rope = dict(getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {})
    theta = float(rope.pop("rope_theta", None) or getattr(c, "rope_theta", None) or 10000.0)
    scaled = (rope.get("rope_type") or rope.get("type") or "default") != "default"
    return HeadConfig(
        kind=kind,
        hidden_size=c.hidden_size,
        intermediate_size=intermediate or c.intermediate_size,
        num_heads=heads,
        num_kv_heads=getattr(c, "num_key_value_heads", None) or heads,
        head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads,
        target_hidden_size=c.hidden_size,
        target_vocab_size=vocab,
        draft_vocab_size=min(draft_vocab, vocab) if kind == "eagle3" else vocab,
        aux_layers=(tuple(aux_layers or default_aux_layers(depth)) if kind == "eagle3" else (depth,)),
        num_layers=layers if kind == "eagle3" else 1,
        rms_norm_eps=getattr(c, "rms_norm_eps", None) or 1e-6,
        rope_theta=theta,
        rope_scaling=rope if scaled else None,
        max_position_embeddings=c.max_position_embeddings,
    )


def check_aux_layers(aux_layers: Sequence[int], depth: int) -> None:
    """UsageError unless aux_layers are distinct hidden-state indices in 1..depth (index i enters layer i;
    index depth is the target's final, normed output)."""
    bad = [i for i in aux_layers if not 1 <= i <= depth]
    if bad or len(set(aux_layers)) != len(aux_layers) or not aux_layers:
        raise UsageError(
            f"--aux-layers {','.join(map(str, aux_layers))}: give distinct target hidden states between 1 "
            f"and {depth} (this target's depth; i is the input of layer i, {depth} its final output)."
        )


def draft_vocabulary(stream: torch.Tensor, size: int, vocab: int) -> torch.Tensor:
    """The `size` most frequent token ids of the training stream, ascending -> [size] (the draft vocab)."""
    counts = torch.bincount(stream, minlength=vocab).float()
    counts += torch.arange(vocab, 0, -1, dtype=torch.float32) * 1e-9  # ties: lower ids first
    return counts.topk(size).indices.sort().values


def set_vocabulary(head: EagleHead, ids: torch.Tensor) -> None:
    """Write d2t (target id = draft id + d2t[draft id]) and t2d (is a target id in the draft vocab)."""
    with torch.no_grad():
        head.d2t.copy_(ids - torch.arange(ids.numel()))
        head.t2d.zero_()
        head.t2d[ids] = True


@torch.no_grad()
def start_from_target(head: EagleHead, target, ids: torch.Tensor) -> None:
    """Start an eagle3 head's output side where the target's is: its final norm and the LM head rows of
    the draft vocabulary (the head's states then only have to land where the target's would)."""
    head.norm.weight.copy_(target.model.norm.weight)
    head.lm_head.weight.copy_(target.get_output_embeddings().weight[ids])


@torch.no_grad()
def target_pass(
    target, batch: torch.Tensor, layers: tuple[int, ...], autocast: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """batch [B, T] -> (features [B, T, len(layers)·H], target log-probs [B, T, V]), float32. autocast:
    the target runs under bfloat16 autocast (the shipped recipes: faster on CPU); False: in its own dtype,
    so the features are exactly those it hands the head when drafting."""
    with mixed_precision(batch.device.type) if autocast else torch.autocast(batch.device.type, enabled=False):
        out = target(input_ids=batch, output_hidden_states=True, use_cache=False)
    features = torch.cat([out.hidden_states[i].float() for i in layers], -1)
    return features, out.logits.float().log_softmax(-1)


# --------------------------------------------------------------------------- the unrolled head


def unrolled_states(
    head: EagleHead, tokens: torch.Tensor, features: torch.Tensor, steps: int
) -> list[torch.Tensor]:
    """Training-time test. tokens [B, T] (x_0..x_{T-1}), features [B, T, F] of those tokens ->
    the head's output states per step [B, T, H]; slot t of step j predicts x_{t+2+j}. Every decoder
    layer keeps its own step-0 keys and its keys of steps 1..j, as its cache holds them when drafting."""
    c, layer = head.config, head.layer
    embed = head.target_embed  # set by the trainer: the target's embedding module (frozen)
    t = tokens.shape[1]
    positions = torch.arange(t, device=tokens.device)
    hidden = head.fuse(features) if c.kind == "eagle3" else features  # [B, T, H]
    causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()  # [T, T]
    memory: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in head.layers]  # per layer, per step
    states = []
    for j in range(steps):
        shifted = torch.roll(tokens, -(1 + j), dims=1)  # slot t reads x_{t+1+j} (wrapped slots are masked)
        embeds = embed(shifted)  # [B, T, H]
        if c.kind == "eagle3":
            normed = layer.hidden_norm(hidden)
            residual = normed if c.norm_before_residual else hidden
            x = torch.cat([layer.input_layernorm(embeds), normed], -1)  # [B, T, 2H]
        else:
            x = head.fc(torch.cat([embeds, hidden], -1))
            residual = x
            x = layer.input_layernorm(x)
        state = layer._finish(residual, _unrolled_attention(layer, x, positions + j, memory[0], causal))
        for deeper, kept in zip(head.layers[1:], memory[1:], strict=True):
            attn = _unrolled_attention(deeper, deeper.input_layernorm(state), positions + j, kept, causal)
            state = deeper._finish(state, attn)  # [B, T, H]
        states.append(state)
        hidden = state
    return states


def _unrolled_attention(
    layer, x: torch.Tensor, positions: torch.Tensor, memory: list, causal: torch.Tensor
) -> torch.Tensor:
    """One layer's attention at unroll step j = len(memory): x [B, T, in] at rope positions [T] ->
    o_proj output [B, T, H]. Slot t attends to the step-0 keys of positions <= t and to its own keys of
    steps 1..j; this step's (k, v) [B, h, T, d] join `memory`."""
    c, a = layer.c, layer.self_attn
    b, t, _ = x.shape
    q = a.q_proj(x).view(b, t, c.num_heads, c.head_dim).transpose(1, 2)  # [B, h, T, d]
    k = a.k_proj(x).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
    v = a.v_proj(x).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
    q, k = layer.rope(q, positions), layer.rope(k, positions)
    groups = c.num_heads // c.num_kv_heads
    if groups > 1:
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    memory.append((k, v))
    scale = 1.0 / math.sqrt(c.head_dim)
    keys0, values0 = memory[0]
    scores = [(q @ keys0.transpose(-1, -2) * scale).masked_fill(~causal, -float("inf"))]  # [B, h, T, T]
    scores += [((q * dk).sum(-1, keepdim=True) * scale) for dk, _ in memory[1:]]  # [B, h, T, 1] each
    weights = torch.cat(scores, -1).float().softmax(-1).to(q.dtype)
    out = weights[..., :t] @ values0
    for i, (_, dv) in enumerate(memory[1:]):
        out = out + weights[..., t + i : t + i + 1] * dv
    return a.o_proj(out.transpose(1, 2).reshape(b, t, c.num_heads * c.head_dim))


def head_loss(
    head: EagleHead,
    target,
    batch: torch.Tensor,
    recipe: HeadRecipe,
    noise: torch.Generator,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The loss of one batch [B, T] and its parts; `agree` [per step]: how often the head's argmax is the
    target's at that draft depth (the greedy acceptance proxy, on this batch)."""
    c = head.config
    features, logp = target_pass(target, batch, c.aux_layers, recipe.target_autocast)  # [B, T, F], [B, T, V]
    if c.kind == "eagle1" and recipe.feature_noise > 0:
        scale = features.pow(2).mean(-1, keepdim=True).sqrt() * recipe.feature_noise
        features = features + torch.randn(features.shape, generator=noise).to(features.device) * scale
    _, t = batch.shape
    with mixed_precision(batch.device.type):
        states = unrolled_states(head, batch, features, recipe.ttt_steps)
    total = torch.zeros((), device=batch.device)
    parts: dict[str, Any] = {}
    agree: list[float] = []
    ids = head.draft_to_target() if c.kind == "eagle3" else None
    for j, state in enumerate(states):
        valid = t - 2 - j  # slots 0..t-3-j have a target distribution at position t+1+j
        if valid <= 0:
            break
        target_logp = logp[:, 1 + j : 1 + j + valid]  # [B, valid, V]
        teacher = target_logp.exp()
        if ids is not None:
            teacher = teacher[..., ids]  # the target's mass on the draft vocabulary
        student = head.draft_logits(state[:, :valid].float(), head.target_head).float().log_softmax(-1)
        distill = -(teacher * student).sum(-1).mean()
        loss = distill
        if c.kind == "eagle1":
            regression = F.smooth_l1_loss(state[:, :valid].float(), features[:, 1 + j : 1 + j + valid])
            loss = recipe.regression_weight * regression + recipe.token_weight * distill
            parts[f"reg{j}"] = round(regression.item(), 4)
        parts[f"kl{j}"] = round(distill.item(), 4)
        with torch.no_grad():
            choice = student.argmax(-1)
            choice = ids[choice] if ids is not None else choice
            agree.append(round((choice == target_logp.argmax(-1)).float().mean().item(), 4))
        total = total + recipe.step_decay**j * loss
    return total, {"loss": round(total.item(), 4), **parts, "agree": agree}


@torch.no_grad()
def evaluate(
    head: EagleHead, target, windows: torch.Tensor, steps: int, autocast: bool = True
) -> dict[str, Any]:
    """Per unroll step: how often the head's argmax equals the target's (a proxy for greedy acceptance
    at that draft position), on validation windows."""
    agree = [0] * steps
    count = [0] * steps
    device = head.fc.weight.device
    ids = head.draft_to_target()
    for row in windows:
        tokens = row[None, :-1].to(device)
        features, logp = target_pass(target, tokens, head.config.aux_layers, autocast)
        states = unrolled_states(head, tokens, features, steps)
        t = tokens.shape[1]
        for j, state in enumerate(states):
            valid = t - 2 - j
            choice = head.draft_logits(state[:, :valid].float(), head.target_head).argmax(-1)
            if ids is not None:
                choice = ids[choice]
            agree[j] += (choice == logp[:, 1 + j : 1 + j + valid].argmax(-1)).sum().item()
            count[j] += valid
    return {"agreement_by_step": [round(a / n, 4) for a, n in zip(agree, count, strict=True)]}


# --------------------------------------------------------------------------- main


def train_head(target, tokenizer, recipe: HeadRecipe, out: Path, log=print) -> dict[str, Any]:
    """Train one head against `target` and write it to out/HEAD_DIRS[kind]; returns the report."""
    torch.manual_seed(recipe.seed)
    corpus = load_corpus(max_files=recipe.max_files)
    train_stream = encode_stream(tokenizer, corpus.train)
    valid_stream = encode_stream(tokenizer, corpus.validation)
    config = head_config(target, recipe.kind, recipe.draft_vocab, recipe.intermediate)
    head = init_weights(EagleHead(config), seed=recipe.seed)
    if config.kind == "eagle3":
        ids = torch.arange(config.target_vocab_size)
        if config.reduced_vocab:
            ids = draft_vocabulary(train_stream, config.draft_vocab_size, config.target_vocab_size)
            set_vocabulary(head, ids)
        start_from_target(head, target, ids)
    for p in target.parameters():
        p.requires_grad_(False)
    # Not submodules: the target's embedding and LM head stay frozen and are not saved with the head.
    object.__setattr__(head, "target_embed", target.get_input_embeddings())
    object.__setattr__(head, "target_head", target.get_output_embeddings())
    params = sum(p.numel() for p in head.parameters())
    log(
        f"{recipe.kind}: {params / 1e6:.2f} M parameters, {plural(recipe.steps, 'step')}, "
        f"draft vocab {config.draft_vocab_size}"
    )
    generator = torch.Generator().manual_seed(recipe.seed + 7)
    noise = torch.Generator().manual_seed(recipe.seed + 8)

    def step_loss() -> tuple[torch.Tensor, dict[str, Any]]:
        window = random_windows(train_stream, recipe.batch_size, recipe.context, generator)
        return head_loss(head, target, window[:, :-1], recipe, noise)

    started = time.perf_counter()
    history = fit(head, recipe.kind, recipe.steps, recipe.lr, recipe.log_every, step_loss)
    seconds = time.perf_counter() - started
    round_trip_half(head)
    windows = fixed_windows(valid_stream, recipe.eval_windows, recipe.context)
    validation = evaluate(head, target, windows, max(recipe.ttt_steps, 4))
    folder = out / HEAD_DIRS[recipe.kind]
    save_head(head, folder, verifier=str(getattr(target, "name_or_path", "") or "embedded:tiny-target"))
    report = {
        "recipe": asdict(recipe),
        "config": config.to_dict(),
        "parameters": params,
        "seconds": round(seconds, 1),
        "history": history,
        "validation": validation,
        "torch": torch.__version__,
    }
    (folder / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    log(f"{recipe.kind}: validation agreement by step {validation['agreement_by_step']}; {seconds:.0f} s")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specli.training.eagle",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help="folder to write tiny-eagle3/, tiny-eagle1/")
    parser.add_argument("--target", type=Path, help="the target folder (default: the embedded tiny target)")
    parser.add_argument("--kind", choices=("eagle3", "eagle1", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="a few steps on a small corpus (for tests)")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--draft-vocab", type=int, help="eagle3: draft vocabulary size")
    parser.add_argument("--ttt-steps", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specli.models.model_dirs import embedded_model

    folder = args.target or embedded_model("tiny-target")
    torch.set_num_threads(max(1, args.threads))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    target = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    args.out.mkdir(parents=True, exist_ok=True)
    for kind in ("eagle3", "eagle1") if args.kind == "both" else (args.kind,):
        recipe = quick_recipe(kind) if args.quick else default_recipe(kind)
        recipe.seed = args.seed
        if args.steps is not None:
            recipe.steps = args.steps
        if args.draft_vocab is not None:
            recipe.draft_vocab = args.draft_vocab
        if args.ttt_steps is not None:
            recipe.ttt_steps = args.ttt_steps
        train_head(target, tokenizer, recipe, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
