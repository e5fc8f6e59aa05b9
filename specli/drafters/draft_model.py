"""`draft` strategy: a small model sharing the target's tokenizer proposes k tokens.

Autoregressively (k forwards: each drafted token is fed back), or, for a PARD-style drafter whose config
names a mask token, in parallel (docs/design.md §10): ONE forward over [pending, MASK x (k-1)] gives all
k distributions (the last pending token's logits draft d_1, the j-th mask's d_{j+1}); the masks are then
cut from the cache, so it only ever holds committed tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from specli.engine.drafter import Drafter, Drafts, Proposal
from specli.engine.sampling import SamplingConfig, ranking_distribution
from specli.engine.tree import TreeGrowth, frontier_inputs, grow
from specli.errors import UsageError
from specli.models.cached_lm import CachedLM, check_sliding_rollback
from specli.models.sources import (  # config keys naming a parallel drafter's mask token and its k
    MASK_TOKEN_KEYS,
    PARALLEL_K_KEY,
    trained_parallel_k,
)

if TYPE_CHECKING:
    from specli.drafters.context import DraftContext


def parallel_mask_token(config: Any) -> int | None:
    """The mask token id of a parallel (PARD-style) draft model, from its config; None when it drafts
    autoregressively."""
    for key in MASK_TOKEN_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def parallel_draft_tokens(config: Any) -> int | None:
    """The default k of a parallel draft model (its recorded K, else PARALLEL_K_DEFAULT); None when it
    drafts autoregressively."""
    if parallel_mask_token(config) is None:
        return None
    return trained_parallel_k(getattr(config, PARALLEL_K_KEY, None))


def recent_window(max_positions: int) -> int:
    """How many recent tokens a draft model keeps once the context outgrows it: 3/4 of its own."""
    return max(1, max_positions * 3 // 4)


class DraftModelDrafter(Drafter):
    """Drafts with its own KV cache. Autoregressive: up to k forwards, each feeding the token drafted
    before; parallel (mask_token set): one forward over [pending, MASK x (k-1)].

    Cache invariant: the cache holds every committed token except `pending` (committed tokens the
    drafter has not run yet: the last correction/bonus, preceded by the accepted drafts it never fed).
    p_min > 0 ends a draft before a token whose drafter probability is below it (the top probability
    of the drafter's own distribution).
    """

    name = "draft"

    def __init__(
        self,
        lm: CachedLM,
        target_vocab: int,
        max_positions: int | None = None,
        mask_token: int | None = None,
        p_min: float = 0.0,
        tree_size: int = 0,
        tree_width: int = 2,
    ) -> None:
        if tree_size and mask_token is not None:
            raise ValueError("a parallel draft model drafts chains only")
        self.tree_size = tree_size  # > 0: token trees of up to that many nodes (docs/design.md §14)
        self.tree_width = tree_width
        self.tree_draws = True  # under sampling its children are drawn from q
        self.lm = lm
        self.mask_token = mask_token  # set: drafts in parallel (PARD)
        self.target_vocab = target_vocab
        self.max_positions = max_positions
        self.p_min = p_min
        self._cache = None
        self._pending: list[int] = []
        self._drafted = torch.empty(0, dtype=torch.long)  # [k] last proposal
        self._fed: int | None = None  # drafts run after pending this round (None: nothing ran)
        self._length = 0  # tokens in the drafter's context (its positions), including pending
        self._tokens: list[int] = []  # every committed token, prompt included

    @property
    def device(self) -> torch.device:
        """Where the drafter samples (the engine gives it a generator there)."""
        return self.lm.output_device

    @property
    def parallel(self) -> bool:
        """Whether a round's drafts come from one forward (its cost barely grows with k)."""
        return self.mask_token is not None

    def reset(self, prompt_ids: list[int]) -> None:
        self._tokens = list(prompt_ids)
        fits = self.max_positions is None or len(prompt_ids) < self.max_positions
        self._restart(len(prompt_ids) if fits else recent_window(self.max_positions))

    def _restart(self, keep: int) -> None:
        """A fresh cache over the most recent `keep` committed tokens, every one of them pending: the
        first draft runs them (a generation whose rounds the cost model never drafts in pays no drafter
        prefill). Drafting from a shorter context than the target's only changes what is proposed; the
        target still verifies every token."""
        recent = self._tokens[-keep:]
        self._cache = self.lm.new_cache()
        self._pending = list(recent)
        self._drafted = torch.empty(0, dtype=torch.long)
        self._fed = None
        self._length = len(recent)

    def _align(self, logits: torch.Tensor) -> torch.Tensor:
        """Drafter logits [.., V_d] -> [.., V_target]: extra rows dropped, missing rows impossible (-inf)."""
        v = logits.shape[-1]
        if v > self.target_vocab:
            return logits[..., : self.target_vocab]
        if v < self.target_vocab:
            pad = logits.new_full((*logits.shape[:-1], self.target_vocab - v), -float("inf"))
            return torch.cat([logits, pad], -1)
        return logits

    def propose(
        self,
        k: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        nodes: int = 0,
        shape: Sequence[int] | None = None,
    ) -> Proposal:
        asked, cut = k, None
        per_depth = self.tree_width if nodes else 1  # positions a depth after the first feeds
        if self.max_positions is not None:  # positions fed this round: length-len(pending) .. length+k-2
            if self._length + (k - 1) * per_depth > self.max_positions:
                self._restart(recent_window(self.max_positions))  # slide to the most recent context
            k = min(k, (self.max_positions - self._length) // per_depth + 1)
            cut = "context" if k < asked else None
        self._fed = None
        if k <= 0:
            self._drafted = torch.empty(0, dtype=torch.long)
            return Proposal(ids=self._drafted, cut=cut)
        if self.mask_token is not None:
            return self._propose_parallel(k, sampling, generator, cut)
        if nodes:
            return self._propose_tree(k, sampling, nodes, generator, shape)
        drafts = Drafts(sampling, generator, self.p_min, cut)
        inp = torch.tensor(self._pending)
        for i in range(k):
            logits = self._align(self.lm.forward(inp, self._cache, last_only=True)[-1].float())  # [V]
            self._fed = i  # pending and d_1..d_i are in the cache now
            inp = drafts.take(logits)  # [1], the next input
            if inp is None:
                break
        proposal = drafts.proposal()
        self._drafted = proposal.ids  # [k']
        return proposal

    def _propose_parallel(
        self, k: int, sampling: SamplingConfig, generator: torch.Generator | None, cut: str | None
    ) -> Proposal:
        """One forward over [pending, MASK x (k-1)]; position i's distribution does not depend on d_<i.
        The masks leave the cache at once: it holds committed tokens only (pending now among them)."""
        if len(self._pending) > 1:  # the backlog first, without logits (a new prompt: all of it)
            self.lm.forward(torch.tensor(self._pending[:-1]), self._cache, last_only=True)
            self._pending = self._pending[-1:]
        inp = torch.tensor(self._pending + [self.mask_token] * (k - 1))  # [k]
        logits = self._align(self.lm.forward(inp, self._cache).float())  # [k, V]
        self.lm.rewind(self._cache, k - 1)
        self._fed = 0
        drafts = Drafts(sampling, generator, self.p_min, cut)
        for row in logits:
            if drafts.take(row) is None:
                break
        proposal = drafts.proposal({"parallel": True, "mask_inputs": k - 1})
        self._drafted = proposal.ids  # [k']
        return proposal

    def _propose_tree(
        self,
        k: int,
        sampling: SamplingConfig,
        size: int,
        generator: torch.Generator | None,
        shape: Sequence[int] | None = None,
    ) -> Proposal:
        """A token tree of depth <= k (EAGLE-2's growth, `grow`: the top tokens, or under sampling
        children drawn from q): pending runs as usual, then each depth ONE forward over the frontier
        nodes, each at position (pending's + depth) and seeing the committed context and its own
        ancestors, which earlier depths left in the cache. Every tree position is rewound before
        returning: the cache holds committed tokens only."""
        length = self.lm.cache_length(self._cache) + len(self._pending)  # with pending, once fed
        first = self._align(self.lm.forward(torch.tensor(self._pending), self._cache, last_only=True)[-1])
        self._pending, self._fed = [], 0  # pending is in the cache now; no draft is
        slots: dict[int, int] = {}  # node -> its cache position

        def expand(frontier: list[int], growth: TreeGrowth) -> torch.Tensor:
            visible, positions = frontier_inputs(growth, frontier, slots, length)  # [w, L + w], [w]
            ids = torch.tensor([growth.tokens[node] for node in frontier])
            logits, _ = self.lm.forward_masked(ids, self._cache, positions, visible)  # [w, V_d]
            return ranking_distribution(self._align(logits), sampling)  # [w, V]

        first = ranking_distribution(first, sampling)
        tokens, parents, probs, q = grow(
            first, expand, k, self.tree_width, size, generator, drawn=not sampling.greedy, shape=shape
        )
        self.lm.rewind(self._cache, len(slots))
        self._drafted = torch.tensor(tokens, dtype=torch.long)
        return Proposal(self._drafted, q, parents=parents, probs=probs, info={"tree": len(tokens)})

    def commit_tree(self, path: list[int], token: int) -> None:
        """The kept path's tokens and `token` become pending: the tree left nothing in the cache."""
        drafted = self._drafted[path].tolist() if path else []
        self._length += len(path) + 1
        self._tokens += drafted + [token]
        self._pending = drafted + [token]
        self._drafted = self._drafted[:0]
        self._fed = None

    def commit(self, accepted: int, token: int) -> None:
        drafted = self._drafted[:accepted].tolist()
        self._length += accepted + 1
        self._tokens += drafted + [token]
        if self._fed is None:  # nothing ran this round: the new token just joins the unseen ones
            self._pending.append(token)
        else:  # the cache grew by pending + d_1..d_fed; keep pending and the accepted drafts among those
            kept = min(accepted, self._fed)
            self.lm.rewind(self._cache, self._fed - kept)
            self._pending = drafted[kept:] + [token]
        self._drafted = self._drafted[:0]
        self._fed = None


def build(context: DraftContext, length: int) -> DraftModelDrafter:
    """Strategy draft's drafter (the strategy table's factory) for a generation (`context`) that can reach
    `length` tokens: the context's drafter model, stepping through its lean forward where one reproduces it
    (else its own, which a sliding window must be able to rewind over `length`)."""
    pair, settings = context, context.settings
    lean = pair.lean_step(pair.draft_model)[0]
    mask_token = parallel_mask_token(pair.draft_model.config)
    if settings.tree and mask_token is not None:
        raise UsageError(
            f"the draft model '{pair.draft_name}' drafts in parallel (PARD), which gives chains only; "
            "drop --tree, or use an autoregressive draft model."
        )
    if lean is None:
        check_sliding_rollback(pair.draft, f"the drafter '{pair.draft_name}'", length)
    return DraftModelDrafter(
        lean or pair.draft,
        pair.target.vocab_size,
        pair.draft_max_positions,
        mask_token=mask_token,
        p_min=settings.draft_p_min,
        tree_size=settings.tree,
        tree_width=settings.tree_width,
    )
