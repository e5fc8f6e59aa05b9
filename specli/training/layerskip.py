"""LayerSkip-style training losses: early exits through the shared head, and rising layer dropout.

The model runs layer by layer through `LayerStack` (its own modules), so an exit costs only a norm + head.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from specli.models.layer_stack import LayerInputs, LayerStack


@dataclass(frozen=True)
class LayerSkipConfig:
    """exit_weights: depth l (1..L-1, layers run) -> weight of the cross-entropy of the exit after l
    layers. exit_fraction: share of positions scored at the intermediate exits (a random subset per
    step, to keep the extra LM-head work small). max_layer_dropout: drop rate of the last layer; layer i
    of L is skipped with rate max_layer_dropout * i / (L - 1), so the first layer is never skipped."""

    exit_weights: dict[int, float] = field(default_factory=dict)
    exit_fraction: float = 0.25
    max_layer_dropout: float = 0.0


def layer_dropout_rates(num_layers: int, max_rate: float) -> list[float]:
    """Per-layer skip probability, rising linearly from 0 (first layer) to max_rate (last layer)."""
    if num_layers <= 1:
        return [0.0] * num_layers
    return [max_rate * i / (num_layers - 1) for i in range(num_layers)]


def _start(model, input_ids: torch.Tensor) -> tuple[LayerStack, torch.Tensor, LayerInputs]:
    """The layer stack, embeddings [B, T, d] and per-layer inputs for a batch with no cache."""
    stack = LayerStack(model)
    hidden = stack.embed(input_ids)
    position_ids = torch.arange(input_ids.shape[1], device=hidden.device).unsqueeze(0)  # [1, T]
    return stack, hidden, stack.prepare(hidden, position_ids, None, 0, stack.num_layers)


def layerskip_loss(
    model, ids: torch.Tensor, config: LayerSkipConfig, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, dict[int, float]]:
    """Training loss on ids [B, T+1] -> (final CE + sum of weighted exit CEs, {depth: CE value}).

    Layer dropout applies to the whole batch of a step (a skipped layer costs nothing that step).
    """
    inputs, labels = ids[:, :-1], ids[:, 1:]
    stack, hidden, layer_inputs = _start(model, inputs)
    num_layers = stack.num_layers
    rates = layer_dropout_rates(num_layers, config.max_layer_dropout)
    seq = inputs.shape[1]
    scored = max(1, int(seq * config.exit_fraction))
    positions = torch.randperm(seq, generator=generator)[:scored].to(ids.device)
    total = torch.zeros((), dtype=torch.float32, device=ids.device)
    parts: dict[int, float] = {}
    for index in range(num_layers):
        if rates[index] > 0 and torch.rand((), generator=generator).item() < rates[index]:
            continue
        hidden = stack.layer(index, hidden, layer_inputs)
        depth = index + 1
        weight = config.exit_weights.get(depth, 0.0)
        if depth < num_layers and weight > 0:
            logits = stack.logits(hidden[:, positions])  # [B, scored, V]
            ce = F.cross_entropy(logits.flatten(0, 1).float(), labels[:, positions].flatten())
            total = total + weight * ce
            parts[depth] = ce.item()
    final = F.cross_entropy(stack.logits(hidden).flatten(0, 1).float(), labels.flatten())
    parts[num_layers] = final.item()
    return total + final, parts


@torch.no_grad()
def depth_logits(model, input_ids: torch.Tensor, depths: list[int]) -> dict[int, torch.Tensor]:
    """Logits [B, T, V] of the exit after each requested depth (all layers run, no dropout)."""
    stack, hidden, layer_inputs = _start(model, input_ids)
    out: dict[int, torch.Tensor] = {}
    for index in range(stack.num_layers):
        hidden = stack.layer(index, hidden, layer_inputs)
        if index + 1 in depths:
            out[index + 1] = stack.logits(hidden).float()
    return out


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) per position, averaged: both [N, V] logits at temperature 1."""
    teacher = F.log_softmax(teacher_logits.float(), dim=-1)
    student = F.log_softmax(student_logits.float(), dim=-1)
    return F.kl_div(student, teacher, log_target=True, reduction="batchmean")
