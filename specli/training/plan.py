"""How much memory a `specli train` run takes, from configs alone (before any weights load): the frozen
target, the trained model with its gradients and AdamW state, and activations per token of a batch
(specli.models.memory.TrainingNeed; the fit check and its advice live there).

Activations are estimated from what each kind's loss keeps alive, in bytes per token of a batch
window: the target's no-grad forward at its peak (every layer's hidden state, which output_hidden_states
keeps, and its logits with their float32 log-softmax), then per unroll step / packed slot the trained
model's layers (projections, MLP, attention weights over the context) and its distributions (teacher,
logits, log-softmax, their product). They are estimates, meant to tell 4 GB from 40 GB.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from specli.models import memory
from specli.models.eagle_head import EagleHead, HeadConfig
from specli.training.recipe import TrainRecipe

F32 = 4
MIXED = F32 + 2  # an activation kept in float32 and its bfloat16 copy under autocast


def target_pass_bytes(target: memory.Shape, dtype_bytes: int) -> int:
    """Per token: the target's forward at its peak (hidden states of every layer, logits, float copy and
    log-softmax)."""
    return (target.num_layers + 1) * target.hidden_size * dtype_bytes + target.vocab_size * (
        dtype_bytes + 2 * F32
    )


def layer_bytes(hidden: int, intermediate: int, heads: int, context: int) -> int:
    """Per token, one decoder layer with gradients: projections and norms (~10 H), the MLP (4 I) and
    attention weights over `context` keys (2 per head: scores and softmax)."""
    return (10 * hidden + 4 * intermediate + 2 * heads * context) * MIXED


def distribution_bytes(vocab: int) -> int:
    """Per token: teacher probabilities, logits, log-softmax and their product, float32."""
    return 4 * vocab * F32


def packed_factor(parallel: int, retain: float) -> float:
    """Slots per window token in a packed layout: the real tokens, then depth j kept with retain**j."""
    return sum(retain**j for j in range(parallel))


def trained_parameters(config: HeadConfig) -> int:
    """The parameters of a head of this config (built on the meta device: no memory)."""
    with torch.device("meta"):
        head = EagleHead(config)
    return sum(p.numel() for p in head.parameters())


def parallel_config(config: HeadConfig) -> HeadConfig:
    """The P-EAGLE head an eagle3 config becomes: a mask token, its own embeddings, mask_hidden."""
    return config if config.parallel else replace(config, mask_token_id=0, own_embeddings=True)


def head_need(
    recipe: TrainRecipe, target: memory.Shape, dtype_bytes: int, quant: str, config: HeadConfig
) -> memory.TrainingNeed:
    """An EAGLE head (eagle3, eagle1, peagle) trained against `target`."""
    if recipe.kind == "peagle":
        config = parallel_config(config)
    frozen = memory.estimate(target, dtype_bytes, quant, 0).weights_bytes
    features = len(config.aux_layers) * config.target_hidden_size * F32 * 2
    if recipe.kind == "peagle":
        factor = packed_factor(recipe.parallel, recipe.retain)
        context = int(recipe.context * factor)
        layers = config.num_layers * layer_bytes(
            config.hidden_size, config.intermediate_size, config.num_heads, context
        )
        slot = layers + distribution_bytes(config.draft_vocab_size) + 2 * target.vocab_size * F32
        per_token = target_pass_bytes(target, dtype_bytes) + features + int(factor * slot)
    else:
        steps = recipe.ttt_steps
        layers = config.num_layers * layer_bytes(
            config.hidden_size, config.intermediate_size, config.num_heads, recipe.context + steps
        )
        per_step = layers + distribution_bytes(config.draft_vocab_size) + target.vocab_size * F32
        per_token = target_pass_bytes(target, dtype_bytes) + features + steps * per_step
    return memory.TrainingNeed(frozen, trained_parameters(config), per_token)


def model_need(
    recipe: TrainRecipe, target: memory.Shape, dtype_bytes: int, quant: str, drafter: memory.Shape
) -> memory.TrainingNeed:
    """A draft model (draft, pard) distilled on `target`: the drafter trains whole, in float32."""
    frozen = memory.estimate(target, dtype_bytes, quant, 0).weights_bytes
    factor = packed_factor(recipe.parallel, recipe.retain) if recipe.kind == "pard" else 1.0
    context = int(recipe.context * factor)
    layers = drafter.num_layers * layer_bytes(
        drafter.hidden_size, drafter.intermediate_size, drafter.num_heads, context
    )
    slot = layers + distribution_bytes(drafter.vocab_size) + target.vocab_size * F32
    per_token = target_pass_bytes(target, dtype_bytes) + int(factor * slot)
    return memory.TrainingNeed(frozen, drafter.parameters() + drafter.hidden_size, per_token)


def heads_need(
    recipe: TrainRecipe, target: memory.Shape, dtype_bytes: int, quant: str
) -> memory.TrainingNeed:
    """Blockwise heads (K = recipe.parallel) trained against `target`: K blocks of H x H, and per token
    each head's state and its distribution over the target's vocabulary."""
    frozen = memory.estimate(target, dtype_bytes, quant, 0).weights_bytes
    k, hidden = recipe.parallel, target.hidden_size
    per_token = target_pass_bytes(target, dtype_bytes) + k * (
        2 * hidden * MIXED + distribution_bytes(target.vocab_size)
    )
    return memory.TrainingNeed(frozen, k * (hidden + 1) * hidden, per_token)


def training_need(
    recipe: TrainRecipe,
    target_config: Any,
    dtype_bytes: int,
    quant: str,
    head: HeadConfig | None = None,
    drafter_config: Any = None,
) -> memory.TrainingNeed | None:
    """The run's need from the target's config (and the head's config or the drafter's), or None when a
    config is too unusual to estimate."""
    try:
        target = memory.Shape.from_config(target_config)
        if recipe.kind == "heads":
            return heads_need(recipe, target, dtype_bytes, quant)
        if head is not None:
            return head_need(recipe, target, dtype_bytes, quant, head)
        return model_need(recipe, target, dtype_bytes, quant, memory.Shape.from_config(drafter_config))
    except (TypeError, ValueError, KeyError, ZeroDivisionError):
        return None
