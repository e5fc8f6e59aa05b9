"""`heads` strategy (alias `blockwise`): blockwise parallel decoding (Stern et al. 2018) with Medusa's
heads (Cai et al. 2024): K residual blocks into the target's own LM head (specli/models/blockwise_heads.py).

Head i (1-based) reads h, the target's final (normed) hidden state at the position that produced the
pending token, and drafts d_i, the token i places after pending. h comes from the target forward the
engine runs anyway (the prefill's last row, then each verify forward's row of the last accepted position:
`feature_layers` = the target's depth), so a round costs one pass of K small blocks and K LM-head rows,
and no extra forward of any model.

Sequential heads (Hydra's form, `HeadsConfig.sequential`): head i also reads the embedding of the token
before its draft (head 1 the pending token's, head i > 1 head i-1's draft), so a chain runs its K blocks
one after another, and a tree node's children come from the next head applied to that node's own state.
Still no forward of any model: q_i is head i's distribution given the drafts before it, as a draft
model's q is.

Medusa heads' q: no draft depends on the drafts before it (all K read the same h); d_i is drawn from
head i's own distribution, processed as the target's p (`Drafts.take`: temperature, top-k, top-p,
min-p), and that distribution is its q: rejection sampling stays exact (docs/design.md §10, as for any
parallel drafter). Greedy: d_i is head i's argmax (q one-hot).

Trees (`--tree N`, Medusa's form): the root's children are head 1's top W tokens (under sampling W draws
from it), and every node at depth d gets head d+1's (`engine.tree.grow`: depth by depth the W likeliest
paths are expanded, as for EAGLE). No head depends on the drafts, so a depth costs nothing but a softmax
and a top-W (or W draws) of one head; the target's verify row of the kept path's last node gives the
next round's state.

Round.info: head ("heads"), target_layers ([L]), parallel (true), heads (K) and, for sequential heads,
sequential (true).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from specli.engine.drafter import Drafter, Drafts, Proposal
from specli.engine.sampling import SamplingConfig, ranking_distribution
from specli.engine.tree import ROOT, TreeGrowth, depths, grow
from specli.errors import ModelLoadError, UsageError
from specli.models.blockwise_heads import BlockwiseHeads, token_inputs

if TYPE_CHECKING:
    from specli.drafters.context import DraftContext

# a tree's expand: frontier nodes and the growth so far -> their children's distributions [w, V]
Expand = Callable[[list[int], TreeGrowth], torch.Tensor]


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
        self._vocab, self._rows = draft_rows(heads, self._lm_head)
        self._embed = target_model.get_input_embeddings() if heads.config.sequential else None
        self._pending: int | None = None  # the pending token (what sequential head 1 reads)
        self._inputs: dict[int, torch.Tensor] = {}  # token id -> token_inputs of it [H] (a cache)
        self._hidden: torch.Tensor | None = None  # [H] the state that produced pending
        self._verified: torch.Tensor | None = None  # [n, H] the last verify forward's states
        self._prefill = False  # a prefill's features are still to come

    @property
    def device(self) -> torch.device:
        """Where the heads sample (beside the target's LM head)."""
        return self.heads.device

    def reset(self, prompt_ids: list[int]) -> None:
        self._hidden, self._verified = None, None
        self._pending = int(prompt_ids[-1]) if len(prompt_ids) else None
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
        info = {"head": "heads", "target_layers": list(self.feature_layers), "parallel": True}
        info["heads"] = self.heads.config.num_heads
        if self._embed is not None:
            info["sequential"] = True
            if nodes:
                return self._propose_tree(
                    self._sequential_growth(sampling), k, sampling, generator, nodes, info, shape
                )
            return self._propose_sequential(k, sampling, generator, info)
        logits = self._project(self.heads.states(self._hidden.to(self.device)))[:k]  # [k, V]
        if nodes:
            growth = self._medusa_growth(logits, sampling)
            return self._propose_tree(growth, logits.shape[0], sampling, generator, nodes, info, shape)
        drafts = Drafts(sampling, generator, self.p_min)
        for row in logits:  # head i's distribution is d_i's q: none depends on the drafts before it
            if drafts.take(row) is None:
                break
        return drafts.proposal(info)

    def _token_inputs(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        """Token ids [n] -> what a sequential head reads of them [n, H], on the heads' device (each
        token's row computed once per drafter)."""
        assert self._embed is not None
        wanted = [int(i) for i in torch.as_tensor(ids).reshape(-1).tolist()]
        missing = [i for i in dict.fromkeys(wanted) if i not in self._inputs]
        if missing:
            rows = torch.tensor(missing, dtype=torch.long, device=self._embed.weight.device)
            computed = token_inputs(self._embed(rows)).to(self.device)  # [m, H]
            self._inputs.update(zip(missing, computed, strict=True))
        return torch.stack([self._inputs[i] for i in wanted])

    def _head_logits(self, i: int, states: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Head i (0-based) after states [n, H] and the tokens before its drafts [n, H] -> (its states
        [n, H], its logits [n, V])."""
        state = self.heads.step(i, states, tokens)
        return state, self._project(state)

    def _project(self, states: torch.Tensor) -> torch.Tensor:
        """Head states [..., H] -> logits [..., V] through the target's LM head: every row of it, or with
        a draft vocabulary its N rows, the other tokens at -inf (q = 0)."""
        if self._vocab is None:
            return self._lm_head(states.to(self._lm_head.weight.dtype))
        assert self._rows is not None
        rows = states.to(self._rows.dtype) @ self._rows.T  # [..., N]
        logits = rows.new_full((*rows.shape[:-1], self._lm_head.weight.shape[0]), float("-inf"))
        return logits.index_copy_(-1, self._vocab, rows)

    def _propose_sequential(
        self, k: int, sampling: SamplingConfig, generator: torch.Generator | None, info: dict[str, Any]
    ) -> Proposal:
        """A chain from sequential heads: head i reads head i-1's state and draft (head 1: h, pending)."""
        assert self._hidden is not None and self._pending is not None
        drafts = Drafts(sampling, generator, self.p_min)
        state, token = self._hidden.to(self.device)[None], torch.tensor([self._pending])  # [1, H], [1]
        for i in range(k):
            state, logits = self._head_logits(i, state, self._token_inputs(token))  # [1, H], [1, V]
            token = drafts.take(logits[0])
            if token is None:
                break
        return drafts.proposal(info)

    def _sequential_growth(self, sampling: SamplingConfig) -> tuple[torch.Tensor, Expand]:
        """(the root's children's distribution [V], expand) for sequential heads: a node at depth d (1 for
        the root's children) gets its children from head d+1 applied to its own state and token, so
        siblings' subtrees differ."""
        assert self._hidden is not None and self._pending is not None
        first_state, first = self._head_logits(
            0, self._hidden.to(self.device)[None], self._token_inputs([self._pending])
        )  # [1, H], [1, V]
        below: dict[int, torch.Tensor] = {ROOT: first_state[0]}  # node -> the state its token followed

        def expand(frontier: list[int], growth: TreeGrowth) -> torch.Tensor:
            at = depths(growth.parents)
            rows: list[torch.Tensor] = [first[0]] * len(frontier)
            for d in sorted({at[node] for node in frontier}):  # one depth per call in practice
                picked = [row for row, node in enumerate(frontier) if at[node] == d]
                nodes = [frontier[row] for row in picked]
                states = torch.stack([below[growth.parents[node]] for node in nodes])  # [w, H]
                tokens = self._token_inputs([growth.tokens[node] for node in nodes])  # [w, H]
                state, logits = self._head_logits(d, states, tokens)  # [w, H], [w, V]
                for j, (row, node) in enumerate(zip(picked, nodes, strict=True)):
                    below[node] = state[j]
                    rows[row] = logits[j]
            return ranking_distribution(torch.stack(rows), sampling)  # [w, V]

        return ranking_distribution(first, sampling)[0], expand

    @staticmethod
    def _medusa_growth(logits: torch.Tensor, sampling: SamplingConfig) -> tuple[torch.Tensor, Expand]:
        """(the root's children's distribution [V], expand) for Medusa's heads from their logits [k, V]: a
        node at depth d takes its children from head d+1, whatever its ancestors are (one state)."""
        dists = ranking_distribution(logits, sampling)  # [k, V]

        def expand(frontier: list[int], growth: TreeGrowth) -> torch.Tensor:
            at = depths(growth.parents)
            return dists[[at[node] for node in frontier]]  # [w, V]: head d+1 for a node at depth d

        return dists[0], expand

    def _propose_tree(
        self,
        growth: tuple[torch.Tensor, Expand],
        depth: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        size: int,
        info: dict[str, Any],
        shape: Sequence[int] | None = None,
    ) -> Proposal:
        """A tree of up to `size` nodes and `depth` levels grown from (first, expand) (`engine.tree.grow`:
        top children greedy, drawn ones under sampling, in `shape` when the cost model chose one)."""
        first, expand = growth
        tokens, parents, probs, q = grow(
            first, expand, depth, self.tree_width, size, generator, drawn=not sampling.greedy, shape=shape
        )
        ids = torch.tensor(tokens, dtype=torch.long)
        return Proposal(ids, q, {**info, "tree": len(tokens)}, parents=parents, probs=probs)

    def commit(self, accepted: int, token: int) -> None:
        self._pending = token
        if self._verified is not None:  # the row of the last accepted token produced `token`
            self._hidden, self._verified = self._verified[accepted], None

    def commit_tree(self, path: list[int], token: int) -> None:
        """The engine observed the root's and the kept path's states: the last produced `token`."""
        self.commit(len(path), token)


def draft_rows(heads: BlockwiseHeads, lm_head: Any) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(the draft vocabulary [N], the LM head's rows for it [N, H]) for heads with one, on the LM head's
    device; (None, None) otherwise. ModelLoadError for ids outside the target's vocabulary, or an LM
    head with a bias (no target specli drafts for has one)."""
    if heads.vocab is None:
        return None, None
    weight = lm_head.weight  # [V, H]
    vocab = heads.vocab.to(weight.device)
    if int(vocab.min()) < 0 or int(vocab.max()) >= weight.shape[0]:
        raise ModelLoadError(
            f"the heads' draft vocabulary names token ids up to {int(vocab.max())}, and the target has "
            f"{weight.shape[0]}: these heads were trained for another target (`specli train heads`)."
        )
    if getattr(lm_head, "bias", None) is not None:
        raise ModelLoadError("the heads' draft vocabulary needs an LM head without a bias.")
    return vocab, weight[vocab].detach().clone()  # [N], [N, H]


def build(context: DraftContext, length: int) -> HeadsDrafter:
    """Strategy heads' drafter (the strategy table's factory): the context's blockwise heads beside the
    target's LM head. UsageError when its heads are not blockwise heads. `length` does not matter: the
    heads keep no cache."""
    heads = context.heads
    if not isinstance(heads, BlockwiseHeads):
        raise UsageError(
            f"strategy 'heads' needs blockwise heads, and '{context.heads_name}' holds none: use "
            f"--strategy eagle with an EAGLE head, or train heads with `specli train heads`."
        )
    settings = context.settings
    return HeadsDrafter(
        heads,
        context.target_model,
        p_min=settings.draft_p_min,
        tree_size=settings.tree,
        tree_width=settings.tree_width,
    )
