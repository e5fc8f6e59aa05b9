"""`self` strategy: self-speculation (LayerSkip). The target's first E layers + its final norm and LM head
draft; verification reuses what the draft computed.

Per round, with the shared target cache holding every committed token but `pending`:
  draft:  pending, d_1 .. d_{k-1} each run through layers [0, E) once (their keys/values stay in the
          cache); the exit after layer E-1 proposes d_1 .. d_k.
  verify: d_k runs through layers [0, E); then layers [E, L) run once over the E-1 hidden states of
          [pending, d_1 .. d_k] -> logits [k+1, V].
Every layer then holds k+1 new positions, so the engine's rewind (crop) of the rejected ones applies to
the early and late layers alike. Layers < E never see a drafted position twice. When the draft stops at
its confidence threshold (p_min), the last token it ran already has its layers [0, E) in the cache, and
verification starts from that instead (a round with no draft at all runs pending through the stack).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from specli.engine.drafter import Drafter, Drafts, Proposal
from specli.engine.sampling import SamplingConfig
from specli.models.cached_lm import check_sliding_rollback
from specli.models.layer_stack import LayerStack

if TYPE_CHECKING:
    from specli.drafters.context import DraftContext


class SelfSpeculativeDrafter(Drafter):
    """Drafts with the first `exit_layer` layers of the target; owns no cache (attaches the target's)."""

    name = "self"
    shares_target_cache = True  # drafts in the target's cache; computes the verify forward itself

    def __init__(self, stack: LayerStack, exit_layer: int, p_min: float = 0.0) -> None:
        if not 1 <= exit_layer < stack.num_layers:
            raise ValueError(f"exit_layer must be in [1, {stack.num_layers - 1}] (got {exit_layer})")
        self.stack = stack
        self.exit_layer = exit_layer
        self.p_min = p_min
        self._cache = None
        self._length = 0  # committed tokens, pending included
        self._pending = 0
        self._hidden: list[torch.Tensor] = []  # [1, 1, d] after layer E-1 for pending, d_1..d_{k-1}

    def reset(self, prompt_ids: list[int]) -> None:
        self._cache = None
        self._length = len(prompt_ids)
        self._pending = prompt_ids[-1]
        self._hidden = []

    def attach(self, cache) -> None:
        """Share the target's cache (filled with the prompt but its last token)."""
        self._cache = cache

    @torch.inference_mode()
    def propose(
        self, k: int, sampling: SamplingConfig, generator: torch.Generator | None, nodes: int = 0
    ) -> Proposal:
        stack, device = self.stack, self.stack.backbone.embed_tokens.weight.device
        token = torch.tensor([[self._pending]], device=device)  # [1, 1]
        position = self._length - 1
        drafts = Drafts(sampling, generator, self.p_min)
        self._hidden = []
        for step in range(k):
            hidden = stack.run(stack.embed(token), 0, self.exit_layer, position + step, self._cache)
            self._hidden.append(hidden)  # [1, 1, d]
            chosen = drafts.take(stack.logits(hidden)[0, -1].float())  # [1] | None
            if chosen is None:
                break
            token = chosen[None]  # [1, 1]
        return drafts.proposal({"exit_layer": self.exit_layer})

    @torch.inference_mode()
    def verify_forward(self, ids: torch.Tensor, cache) -> torch.Tensor:
        """ids [k+1] = [pending, d_1..d_k] as proposed -> target logits [k+1, V], reusing the draft."""
        stack = self.stack
        k = ids.shape[0] - 1
        first = self._length - 1
        if len(self._hidden) == k:  # d_k (pending when k = 0) has not run layers [0, E) yet
            last = stack.run(stack.embed(ids[-1:][None]), 0, self.exit_layer, first + k, cache)  # [1, 1, d]
            self._hidden.append(last)
        elif len(self._hidden) != k + 1:  # k + 1: the draft stopped at its threshold after running d_k
            raise RuntimeError("verify_forward must follow a propose of the same tokens")
        hidden = torch.cat(self._hidden, dim=1)  # [1, k+1, d]
        hidden = stack.run(hidden, self.exit_layer, stack.num_layers, first, cache)
        return stack.logits(hidden)[0]  # [k+1, V]

    def commit(self, accepted: int, token: int) -> None:
        self._length += accepted + 1
        self._pending = token
        self._hidden = []


def build(context: DraftContext, length: int) -> SelfSpeculativeDrafter:
    """Strategy self's drafter (the strategy table's factory): the target's first settings.exit_layer
    layers, in the target's own cache (whose sliding window, if any, must rewind over `length`)."""
    pair, settings = context, context.settings
    check_sliding_rollback(pair.target, f"'{pair.target_name}' (strategy self)", length)
    stack = LayerStack(pair.target_model)
    return SelfSpeculativeDrafter(stack, settings.exit_layer, p_min=settings.draft_p_min)
