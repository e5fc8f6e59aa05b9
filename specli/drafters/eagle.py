"""`eagle` strategy: an EAGLE head drafts from the target's own hidden states (EAGLE-1 and EAGLE-3).

The head reads features the target computes anyway: the engine hands them over after the prefill and
after every verify forward (its `feature_layers`), so no extra target forward ever runs.

Per round, with m pairs (feature of x_t, token x_{t+1}) known to be true since the last round:
  draft:  ONE head step over those m pairs (its cache now holds only true positions) gives d_1; then
          k-1 single steps feed the head's own state and the drafted token back (the chain).
  commit: the chain's positions are cut from the head's cache; the verify forward's features of pending
          and the accepted drafts, paired with the next committed tokens, wait for the next round.
A P-EAGLE head drafts in parallel (docs/design.md §10): the same single head step also runs k-1
placeholder positions (its mask token's embedding, fc(mask_hidden)) after the true pairs; their outputs
draft d_2..d_k, so a round costs ONE head forward whatever k is. Commit cuts them like the chain.
A reduced draft vocabulary maps into the target's (q is zero outside it), so rejection sampling stays
exact: the target verifies every token as with any other drafter.

Round.info: head (eagle1 | eagle3 | peagle), parallel and mask_inputs (P-EAGLE), target_layers (the
hidden states read), draft_vocab (its size) and,
with a reduced vocabulary, token_in_draft_vocab (whether the head could have drafted the token the
target added).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from specli.engine.drafter import Drafter, Drafts, Proposal
from specli.engine.sampling import SamplingConfig, ranking_distribution
from specli.engine.tree import TreeGrowth, frontier_inputs, grow
from specli.errors import UsageError
from specli.models.eagle_head import EagleHead, HeadCache
from specli.models.own_forward.core import LeanKV
from specli.models.own_forward.head import LeanHead

if TYPE_CHECKING:
    from specli.drafters.context import DraftContext


class EagleDrafter(Drafter):
    """Drafts with an EagleHead beside the target's LM head; keeps the head's own KV cache. With `lean`
    (a LeanHead of the same head) the head's layers run through specli's lean step (docs/design.md §13)
    over a preallocated cache; without, through EagleHead.step."""

    name = "eagle"

    def __init__(
        self,
        head: EagleHead,
        target_model: Any,
        p_min: float = 0.0,
        lean: LeanHead | None = None,
        tree_size: int = 0,
        tree_width: int = 2,
    ) -> None:
        if tree_size and head.config.parallel:
            raise ValueError("a parallel (P-EAGLE) head drafts chains only")
        self.tree_size = tree_size  # > 0: token trees of up to that many nodes (docs/design.md §14)
        self.tree_width = tree_width
        self.tree_draws = True  # under sampling its children are drawn from q
        self.head = head
        self.lean = lean
        self.p_min = p_min  # end a draft before a token the head gives less than this
        self.feature_layers = tuple(head.config.aux_layers)
        own = getattr(head, "embed_tokens", None)  # P-EAGLE heads train their own
        self._embed = own if own is not None else target_model.get_input_embeddings()
        self._target_head = target_model.get_output_embeddings()
        self._target_vocab = self._target_head.weight.shape[0]
        self._draft_ids = head.draft_to_target()  # [V_draft] target ids, or None (same vocabulary)
        self._cache = self._new_cache()
        self._prompt: list[int] = []
        self._true_features: list[torch.Tensor] = []  # [m_i, F] blocks not yet run through the head
        self._true_tokens: list[int] = []  # the token after each of those positions
        self._verified: torch.Tensor | None = None  # [k+1, F] the last verify forward's features
        self._drafted: list[int] = []
        self._true_length = 0  # head positions that came from true features
        self._info: dict[str, Any] = {}  # the last proposal's info (commit adds what the round showed)
        self._vocab = set(self._draft_ids.tolist()) if self._draft_ids is not None else None
        self._placeholder: tuple[torch.Tensor, torch.Tensor] | None = None  # P-EAGLE: (embed, hidden) [1, H]
        if head.config.parallel:  # the same every round: computed once
            with torch.inference_mode():
                mask = self._embeddings([head.config.mask_token_id])
                self._placeholder = (mask, head.placeholders(1))

    @property
    def device(self) -> torch.device:
        """Where the head samples (it sits beside the target's LM head)."""
        return self.head.fc.weight.device

    @property
    def parallel(self) -> bool:
        """Whether a round's drafts come from one head forward (P-EAGLE)."""
        return self.head.config.parallel

    def _new_cache(self) -> HeadCache | LeanKV:
        return self.lean.new_cache() if self.lean is not None else HeadCache()

    def _step(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor | None = None,
        visible: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The head's layers over n positions after its cache: embeds, hidden [n, H] -> states [n, H].
        A tree's step names each position's own (positions [n]) and the keys it sees (visible)."""
        if self.lean is not None:
            return self.lean.step(embeds, hidden, self._cache, positions, visible)
        if positions is None:
            start = self._cache.length
            positions = torch.arange(start, start + embeds.shape[0], device=self.device)
        return self.head.step(embeds, hidden, positions.to(self.device), self._cache, visible)

    def reset(self, prompt_ids: list[int]) -> None:
        self._cache = self._new_cache()
        self._prompt = list(prompt_ids) if len(prompt_ids) > 1 else []  # a prefill's features will come
        self._true_features, self._true_tokens = [], []
        self._verified, self._drafted, self._true_length = None, [], 0

    def observe_features(self, features: torch.Tensor) -> None:
        """features [n, F] of the positions the target just ran (the prefill's, then each verify's)."""
        if self._prompt:  # the prefill: prompt[:-1], each followed by the next prompt token
            self._queue(features, self._prompt[1:])
            self._prompt = []
        else:
            self._verified = features  # [k+1, F]: pending, d_1..d_k; sorted out at commit

    def _queue(self, features: torch.Tensor, next_tokens: list[int]) -> None:
        self._true_features.append(features)
        self._true_tokens += next_tokens

    def _embeddings(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        """Token ids -> the target's embeddings [n, H] on the head's device and dtype."""
        ids = torch.as_tensor(ids, dtype=torch.long, device=self._embed.weight.device)
        return self._embed(ids).to(self.device, self.head.fc.weight.dtype)

    def _target_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary [..., V_draft] -> over the target's [..., V_target] (-inf
        outside)."""
        draft_logits = draft_logits.float()
        lead = draft_logits.shape[:-1]
        if self._draft_ids is None:
            v = draft_logits.shape[-1]
            if v >= self._target_vocab:
                return draft_logits[..., : self._target_vocab]
            pad = draft_logits.new_full((*lead, self._target_vocab - v), -float("inf"))
            return torch.cat([draft_logits, pad], -1)
        full = draft_logits.new_full((*lead, self._target_vocab), -float("inf"))
        return full.index_copy(-1, self._draft_ids, draft_logits)

    @torch.inference_mode()
    def propose(
        self,
        k: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        nodes: int = 0,
        shape: Sequence[int] | None = None,
    ) -> Proposal:
        self._drafted = []
        if not self._true_tokens:  # no feature yet (a one-token prompt): this round is a plain step
            return Proposal.empty()
        head = self.head
        dtype = head.fc.weight.dtype
        features = torch.cat(self._true_features).to(self.device, dtype)  # [m, F]
        start, m = self._cache.length, features.shape[0]
        embeds, hidden = self._embeddings(self._true_tokens), head.fuse(features)  # [m, H] each
        masks = k - 1 if head.config.parallel and k > 1 else 0
        if masks:  # P-EAGLE: k-1 placeholders ride along in the same forward
            mask_embed, mask_hidden = self._placeholder
            embeds = torch.cat([embeds, mask_embed.expand(masks, -1)])
            hidden = torch.cat([hidden, mask_hidden.expand(masks, -1)])
        states = self._step(embeds, hidden)  # [m + masks, H]
        self._true_features, self._true_tokens = [], []
        self._true_length = start + m
        self._info = {"head": head.config.label}
        if head.config.parallel:
            return self._propose_parallel(states[m - 1 :], sampling, generator)
        state = states[-1:]  # [1, H]
        if nodes:
            return self._propose_tree(state, k, sampling, nodes, generator, shape)
        drafts = Drafts(sampling, generator, self.p_min)
        for i in range(k):
            token = drafts.take(self._target_logits(head.draft_logits(state, self._target_head)[-1]))
            if token is None:
                break
            if i < k - 1:  # the chain: the head's own state stands in for the missing feature
                state = self._step(self._embeddings(token), state)
        return self._proposal(drafts)

    def _distribution(self, states: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
        """Output states [n, H] -> the head's distributions over the target's vocabulary [n, V]: what
        ranks tree nodes (`ranking_distribution`)."""
        logits = self._target_logits(self.head.draft_logits(states, self._target_head))  # [n, V]
        return ranking_distribution(logits, sampling)

    def _described(self, **extra: Any) -> dict[str, Any]:
        """This round's info: the head, the target layers it reads, its draft vocabulary (and `extra`)."""
        self._info.update(
            target_layers=list(self.feature_layers), draft_vocab=self.head.config.draft_vocab_size, **extra
        )
        return self._info

    def _propose_tree(
        self,
        root: torch.Tensor,
        k: int,
        sampling: SamplingConfig,
        size: int,
        generator: torch.Generator | None,
        shape: Sequence[int] | None = None,
    ) -> Proposal:
        """A token tree of depth <= k grown from the root state [1, H] (EAGLE-2's growth, `grow`: the top
        tokens, or under sampling children drawn from q): each depth ONE head step
        over the frontier, node x entering as (embedding of x, the state that drafted x) at position
        (true length + depth - 1), seeing the true positions and its own ancestors' slots. The tree's
        slots are cut at commit (the cache keeps true positions only)."""
        start = self._cache.length  # == self._true_length
        state_of: dict[int, torch.Tensor] = {}  # node -> the state its children are drafted from [1, H]
        slots: dict[int, int] = {}

        def expand(frontier: list[int], growth: TreeGrowth) -> torch.Tensor:
            visible, positions = frontier_inputs(growth, frontier, slots, start)  # [w, T + w], [w]
            parents = [growth.parents[node] for node in frontier]
            hidden = [root if parent < 0 else state_of[parent] for parent in parents]
            tokens = [growth.tokens[node] for node in frontier]
            states = self._step(self._embeddings(tokens), torch.cat(hidden), positions, visible)  # [w, H]
            for row, node in enumerate(frontier):
                state_of[node] = states[row : row + 1]
            return self._distribution(states, sampling)  # [w, V]

        first = self._distribution(root, sampling)[0]
        tokens, parents, probs, q = grow(
            first, expand, k, self.tree_width, size, generator, drawn=not sampling.greedy, shape=shape
        )
        self._drafted = tokens
        info = self._described(tree=len(tokens))
        return Proposal(torch.tensor(tokens, dtype=torch.long), q, info, parents=parents, probs=probs)

    def _propose_parallel(
        self, states: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> Proposal:
        """states [k, H]: the last true slot's and the placeholders' outputs -> d_1..d_k, each drawn from
        its own position's distribution (none depends on the drafts before it)."""
        logits = self.head.draft_logits(states, self._target_head)  # [k, V_draft]
        drafts = Drafts(sampling, generator, self.p_min)
        self._info.update(parallel=True, mask_inputs=states.shape[0] - 1)
        for row in logits:
            if drafts.take(self._target_logits(row)) is None:
                break
        return self._proposal(drafts)

    def _proposal(self, drafts: Drafts) -> Proposal:
        proposal = drafts.proposal(self._described())
        self._drafted = proposal.ids.tolist()
        return proposal

    def commit_tree(self, path: list[int], token: int) -> None:
        """The engine observed the root's and the path's features (in that order) after verifying."""
        self._drafted = [self._drafted[i] for i in path]
        self.commit(len(path), token)

    def commit(self, accepted: int, token: int) -> None:
        if self._vocab is not None and self._info:  # could the head have drafted the target's token?
            self._info["token_in_draft_vocab"] = token in self._vocab
        self._info = {}
        self._cache.crop(self._true_length)  # drop the chain: only true positions stay
        if self._verified is not None:  # pending and the accepted drafts now have true features
            next_tokens = self._drafted[:accepted] + [token]
            self._queue(self._verified[: accepted + 1], next_tokens)
        self._verified, self._drafted = None, []


def build(context: DraftContext, length: int) -> EagleDrafter:
    """Strategy eagle's drafter (the strategy table's factory): the context's EAGLE head beside the target,
    stepping through its lean forward unless lean steps are off. `length` does not matter: the head's
    cache grows as it needs."""
    pair, settings = context, context.settings
    lean = pair.lean_step(pair.head)[0]
    if settings.tree and pair.head.config.parallel:
        raise UsageError(
            f"the head '{pair.head_name}' drafts in parallel (P-EAGLE), which gives chains only; "
            "drop --tree, or use an autoregressive EAGLE head."
        )
    return EagleDrafter(
        pair.head,
        pair.target_model,
        p_min=settings.draft_p_min,
        lean=lean,
        tree_size=settings.tree,
        tree_width=settings.tree_width,
    )
