"""`heads` strategy (alias `blockwise`): blockwise parallel decoding (Stern et al. 2018) with Medusa's
heads (Cai et al. 2024): K residual blocks into the target's own LM head (specli/models/blockwise_heads.py).

Head i (1-based) reads h, the target's final (normed) hidden state at the position that produced the
pending token, and drafts d_i, the token i places after pending. h comes from the target forward the
engine runs anyway (the prefill's last row, then each verify forward's row of the last accepted position:
`feature_layers` = the target's depth), so a round costs one pass of K small blocks and K LM-head rows,
and no extra forward of any model.

q: no draft depends on the drafts before it (all K read the same h); d_i is drawn from head i's own
distribution, processed as the target's p (`Drafts.take`: temperature, top-k, top-p, min-p), and that
distribution is its q: rejection sampling stays exact (docs/design.md §10, as for any parallel drafter).
Greedy: d_i is head i's argmax (q one-hot).

Trees (`--tree N`, Medusa's form): the root's children are head 1's top W tokens (under sampling W draws
from it), and every node at depth d gets head d+1's (`engine.tree.grow`: depth by depth the W likeliest
paths are expanded, as for EAGLE). No head depends on the drafts, so a depth costs nothing but a softmax
and a top-W (or W draws) of one head; the target's verify row of the kept path's last node gives the
next round's state.

Round.info: head ("heads"), target_layers ([L]), parallel (true) and heads (K).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from specli.engine.drafter import Drafter, Drafts, Proposal
from specli.engine.sampling import SamplingConfig, ranking_distribution
from specli.engine.tree import TreeGrowth, depths, grow
from specli.errors import UsageError
from specli.models.blockwise_heads import BlockwiseHeads

if TYPE_CHECKING:
    from specli.drafters.context import DraftContext


class HeadsDrafter(Drafter):
    """Drafts up to K tokens a round from the last hidden state the target produced; keeps no cache."""

    name = "heads"
    parallel = True

    def __init__(
        self,
        heads: BlockwiseHeads,
        target_model: Any,
        p_min: float = 0.0,
        tree_size: int = 0,
        tree_width: int = 2,
    ) -> None:
        self.heads = heads
        self.p_min = p_min  # end a draft before a token its head gives less than this
        self.tree_size = tree_size  # > 0: token trees of up to that many nodes (docs/design.md §14)
        self.tree_width = tree_width
        self.tree_draws = True  # under sampling its children are drawn from q
        self.feature_layers = (int(target_model.config.get_text_config().num_hidden_layers),)
        self._lm_head = target_model.get_output_embeddings()
        self._hidden: torch.Tensor | None = None  # [H] the state that produced pending
        self._verified: torch.Tensor | None = None  # [n, H] the last verify forward's states
        self._prefill = False  # a prefill's features are still to come

    @property
    def device(self) -> torch.device:
        """Where the heads sample (beside the target's LM head)."""
        return self.heads.device

    def reset(self, prompt_ids: list[int]) -> None:
        self._hidden, self._verified = None, None
        self._prefill = len(prompt_ids) > 1  # a one-token prompt has no prefill forward

    def observe_features(self, features: torch.Tensor) -> None:
        """features [n, H]: the prefill's (its last row produced pending), then each verify forward's
        ([pending, d_1..d_k]: row `accepted` produces the next pending; chosen at commit)."""
        if self._prefill:
            self._hidden, self._prefill = features[-1], False
        else:
            self._verified = features

    @torch.inference_mode()
    def propose(
        self,
        k: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        nodes: int = 0,
        shape: Sequence[int] | None = None,
    ) -> Proposal:
        if self._hidden is None or k < 1:  # no state yet (a one-token prompt): a plain step
            return Proposal.empty()
        k = min(k, self.heads.config.num_heads)
        logits = self.heads.logits(self._hidden.to(self.device), self._lm_head)[:k]  # [k, V]
        info = {"head": "heads", "target_layers": list(self.feature_layers), "parallel": True}
        info["heads"] = self.heads.config.num_heads
        if nodes:
            return self._propose_tree(logits, sampling, generator, nodes, info, shape)
        drafts = Drafts(sampling, generator, self.p_min)
        for row in logits:  # head i's distribution is d_i's q: none depends on the drafts before it
            if drafts.take(row) is None:
                break
        return drafts.proposal(info)

    def _propose_tree(
        self,
        logits: torch.Tensor,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        size: int,
        info: dict[str, Any],
        shape: Sequence[int] | None = None,
    ) -> Proposal:
        """Medusa's tree from the heads' logits [k, V]: a node at depth d takes its children from head
        d+1, whatever its ancestors are (the heads read one state)."""
        dists = ranking_distribution(logits, sampling)  # [k, V]

        def expand(frontier: list[int], growth: TreeGrowth) -> torch.Tensor:
            at = depths(growth.parents)
            return dists[[at[node] for node in frontier]]  # [w, V]: head d+1 for a node at depth d

        tokens, parents, probs, q = grow(
            dists[0],
            expand,
            logits.shape[0],
            self.tree_width,
            size,
            generator,
            drawn=not sampling.greedy,
            shape=shape,
        )
        ids = torch.tensor(tokens, dtype=torch.long)
        return Proposal(ids, q, {**info, "tree": len(tokens)}, parents=parents, probs=probs)

    def commit(self, accepted: int, token: int) -> None:
        if self._verified is not None:  # the row of the last accepted token produced `token`
            self._hidden, self._verified = self._verified[accepted], None

    def commit_tree(self, path: list[int], token: int) -> None:
        """The engine observed the root's and the kept path's states: the last produced `token`."""
        self.commit(len(path), token)


def build(context: DraftContext, length: int) -> HeadsDrafter:
    """Strategy heads' drafter (the strategy table's factory): the context's blockwise heads beside the
    target's LM head. UsageError when the pair's head is an EAGLE head. `length` does not matter: the
    heads keep no cache."""
    heads = context.head
    if not isinstance(heads, BlockwiseHeads):
        raise UsageError(
            f"strategy 'heads' needs blockwise heads, and '{context.head_name}' is an EAGLE head: use "
            f"--strategy eagle with it, or train heads with `specli train heads`."
        )
    settings = context.settings
    return HeadsDrafter(
        heads,
        context.target_model,
        p_min=settings.draft_p_min,
        tree_size=settings.tree,
        tree_width=settings.tree_width,
    )
