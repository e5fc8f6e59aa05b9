"""Blockwise heads (`specli train heads`): K residual blocks into the target's own LM head
(specli/models/blockwise_heads.py), distilled on the target's own distributions (Medusa-1's recipe: the
target frozen, only the heads train).

Alignment: h_t, the target's final hidden state at position t, is what produced x_{t+1}; head i (1-based)
reads h_t and learns the target's distribution at position t + i (the one over x_{t+1+i}), by the
cross-entropy to that whole distribution (KL up to the target's entropy), weighted step_decay**(i-1) as
the EAGLE recipes weight later draft depths. Its agreement is how often its argmax is the target's there:
the greedy acceptance proxy of draft position i.

Sequential heads (`--sequential`) read the true tokens x_{t+1} .. x_{t+i} before their own (teacher
forcing, as EAGLE's training reads true features): slot t of head i is valid while t + i < T.
"""

from __future__ import annotations

from typing import Any

import torch

from specli.models.blockwise_heads import BlockwiseHeads, HeadsConfig, token_inputs
from specli.training.common import mixed_precision


def new_heads(
    target: Any, num_heads: int, target_name: str = "", sequential: bool = False, intermediate: int = 0
) -> BlockwiseHeads:
    """K fresh heads for the target: zero (last) layers, so each starts as the target's LM head."""
    hidden = int(target.config.get_text_config().hidden_size)
    return BlockwiseHeads(HeadsConfig(num_heads, hidden, target_name, sequential, intermediate))


def teacher_tokens(heads: BlockwiseHeads, target: Any, batch: torch.Tensor) -> torch.Tensor | None:
    """batch [B, T] -> what sequential heads read at each slot t [K, B, T, H]: head i (0-based) the
    embedding of x_{t+1+i}, zeros past the window's end (slots no loss reads); None for Medusa heads."""
    if not heads.config.sequential:
        return None
    with torch.no_grad():
        embedded = token_inputs(target.get_input_embeddings()(batch))  # [B, T, H]
    t = batch.shape[1]
    shifted = []
    for i in range(heads.config.num_heads):
        part = embedded[:, i + 1 :]
        shifted.append(torch.cat([part, part.new_zeros(part.shape[0], t - part.shape[1], part.shape[2])], 1))
    return torch.stack(shifted)


def target_pass(target: Any, batch: torch.Tensor, autocast: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """batch [B, T] -> (final hidden states [B, T, H], target log-probs [B, T, V]), float32; autocast: the
    target under bfloat16 autocast (False: its own dtype, the states it hands the heads when drafting)."""
    device = batch.device.type
    with (
        torch.no_grad(),
        mixed_precision(device) if autocast else torch.autocast(device, enabled=False),
    ):
        out = target(input_ids=batch, output_hidden_states=True, use_cache=False)
    return out.hidden_states[-1].float(), out.logits.float().log_softmax(-1)


def heads_loss(
    heads: BlockwiseHeads, target: Any, batch: torch.Tensor, step_decay: float = 0.8, autocast: bool = False
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The loss of one batch [B, T] and its parts: `ce{i}` per head and `agree` [K], how often head i's
    argmax is the target's at its position on this batch."""
    hidden, logp = target_pass(target, batch, autocast)  # [B, T, H], [B, T, V]
    lm_head = target.get_output_embeddings()
    t = batch.shape[1]
    total = torch.zeros((), device=batch.device)
    parts: dict[str, Any] = {}
    agree: list[float] = []
    tokens = teacher_tokens(heads, target, batch)  # [K, B, T, H] or None
    with mixed_precision(batch.device.type):
        states = heads.states(hidden, tokens)  # [K, B, T, H]
    for i, state in enumerate(states, start=1):
        valid = t - i  # slots 0..t-1-i have the target's distribution at t + i
        if valid <= 0:
            break
        teacher = logp[:, i : i + valid]  # [B, valid, V]
        with mixed_precision(batch.device.type):
            logits = lm_head(state[:, :valid].to(lm_head.weight.dtype))
        student = logits.float().log_softmax(-1)
        ce = -(teacher.exp() * student).sum(-1).mean()
        total = total + step_decay ** (i - 1) * ce
        parts[f"ce{i}"] = round(ce.item(), 4)
        agree.append(round((student.argmax(-1) == teacher.argmax(-1)).float().mean().item(), 4))
    return total, {"loss": round(total.item(), 4), **parts, "agree": agree}


@torch.no_grad()
def evaluate(
    heads: BlockwiseHeads, target: Any, windows: torch.Tensor, autocast: bool = False
) -> list[float]:
    """Head i's top-1 agreement with the target (its argmax equal to the target's at position t + i),
    over every slot of the windows [n, C+1] -> [K], head 1 first."""
    k = heads.config.num_heads
    agree, count = [0] * k, [0] * k
    lm_head = target.get_output_embeddings()
    for row in windows:
        tokens = row[None, :-1].to(heads.device)
        hidden, logp = target_pass(target, tokens, autocast)
        states = heads.states(hidden, teacher_tokens(heads, target, tokens))  # [K, 1, T, H]
        t = tokens.shape[1]
        for i in range(1, min(k, t - 1) + 1):
            valid = t - i
            choice = lm_head(states[i - 1][:, :valid].to(lm_head.weight.dtype)).argmax(-1)
            agree[i - 1] += (choice == logp[:, i : i + valid].argmax(-1)).sum().item()
            count[i - 1] += valid
    return [round(a / n, 4) if n else 0.0 for a, n in zip(agree, count, strict=True)]
