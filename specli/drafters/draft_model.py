"""`draft` strategy: a small model sharing the target's tokenizer proposes k tokens.

Autoregressively (k forwards: each drafted token is fed back), or, for a PARD-style drafter whose config
names a mask token, in parallel (docs/design.md §10): ONE forward over [pending, MASK x (k-1)] gives all
k distributions (the last pending token's logits draft d_1, the j-th mask's d_{j+1}); the masks are then
cut from the cache, so it only ever holds committed tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from specli.cached_lm import CachedLM
from specli.drafters.base import Proposal
from specli.sampling import SamplingConfig, choose

MASK_TOKEN_KEYS = ("pard_token", "ptd_token_id")  # config keys naming a parallel drafter's mask token
PARALLEL_K_KEY = "para_num"  # the drafts per forward a parallel drafter was trained for, when recorded
PARALLEL_K_DEFAULT = 8  # PARD's training K; its own examples draft 8-12


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
    value = getattr(config, PARALLEL_K_KEY, None)
    return value if isinstance(value, int) and value >= 1 else PARALLEL_K_DEFAULT


def recent_window(max_positions: int) -> int:
    """How many recent tokens a draft model keeps once the context outgrows it: 3/4 of its own."""
    return max(1, max_positions * 3 // 4)


class DraftModelDrafter:
    """Drafts with its own KV cache. Per round: k forwards; the last drafted token is fed next round.

    Cache invariant: the cache holds every committed token except `pending` (tokens the drafter has not
    yet run: the last correction/bonus, preceded by the final draft token after a fully accepted round).
    """

    name = "draft"

    def __init__(
        self,
        lm: CachedLM,
        target_vocab: int,
        max_positions: int | None = None,
        mask_token: int | None = None,
    ) -> None:
        self.lm = lm
        self.mask_token = mask_token  # set: drafts in parallel (PARD)
        self.target_vocab = target_vocab
        self.max_positions = max_positions
        self._cache = None
        self._pending: list[int] = []
        self._drafted = torch.empty(0, dtype=torch.long)  # [k] last proposal
        self._length = 0  # tokens in the drafter's context (its positions), including pending
        self._tokens: list[int] = []  # every committed token, prompt included

    @property
    def device(self) -> torch.device:
        """Where the drafter samples (the engine gives it a generator there)."""
        return self.lm.output_device

    def reset(self, prompt_ids: list[int]) -> None:
        self._tokens = list(prompt_ids)
        fits = self.max_positions is None or len(prompt_ids) < self.max_positions
        self._restart(len(prompt_ids) if fits else recent_window(self.max_positions))

    def _restart(self, keep: int) -> None:
        """A fresh cache over the most recent `keep` committed tokens. Drafting from a shorter context
        than the target's only changes what is proposed; the target still verifies every token."""
        recent = self._tokens[-keep:]
        self._cache = self.lm.new_cache()
        if len(recent) > 1:
            self.lm.forward(torch.tensor(recent[:-1]), self._cache, last_only=True)
            self.lm.settle(self._cache)
        self._pending = [recent[-1]]
        self._drafted = torch.empty(0, dtype=torch.long)
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

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None) -> Proposal:
        if self.max_positions is not None:  # positions fed this round: length-len(pending) .. length+k-2
            if self._length + k - 1 > self.max_positions:
                self._restart(recent_window(self.max_positions))  # slide to the most recent context
            k = min(k, self.max_positions - self._length + 1)
        if self.mask_token is not None and k > 0:
            return self._propose_parallel(k, sampling, generator)
        ids: list[torch.Tensor] = []
        qs: list[torch.Tensor] = []
        inp = torch.tensor(self._pending)
        for _ in range(max(k, 0)):
            logits = self._align(self.lm.forward(inp, self._cache, last_only=True)[-1].float())  # [V]
            tok, q = choose(logits, sampling, generator)  # [1], [V] | None
            ids.append(tok)
            if q is not None:
                qs.append(q)
            inp = tok
        self._drafted = torch.cat(ids) if ids else torch.empty(0, dtype=torch.long)  # [k]
        return Proposal(ids=self._drafted, q=torch.stack(qs) if qs else None)

    def _propose_parallel(
        self, k: int, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> Proposal:
        """One forward over [pending, MASK x (k-1)]; position i's distribution does not depend on d_<i."""
        n = len(self._pending)
        inp = torch.tensor(self._pending + [self.mask_token] * (k - 1))  # [n + k - 1]
        logits = self._align(self.lm.forward(inp, self._cache)[n - 1 :].float())  # [k, V]
        self.lm.rewind(self._cache, k - 1)  # the masks leave at once: the cache holds committed tokens
        ids: list[torch.Tensor] = []
        qs: list[torch.Tensor] = []
        for row in logits:
            token, q = choose(row, sampling, generator)  # [1], [V] | None
            ids.append(token)
            if q is not None:
                qs.append(q)
        self._drafted = torch.cat(ids)  # [k]
        info = {"parallel": True, "mask_inputs": k - 1}
        return Proposal(ids=self._drafted, q=torch.stack(qs) if qs else None, info=info)

    def commit(self, accepted: int, token: int) -> None:
        k = self._drafted.shape[0]
        if self.mask_token is not None and k > 0:  # parallel: the drafts were never fed as tokens
            self._length += accepted + 1
            self._tokens += self._drafted[:accepted].tolist() + [token]
            self._pending = self._pending[:0] + self._drafted[:accepted].tolist() + [token]
            self._drafted = self._drafted[:0]
            return
        self._length += accepted + 1
        self._tokens += self._drafted[:accepted].tolist() + [token]
        if k == 0:  # nothing ran this round: the new token just joins the unseen ones
            self._pending.append(token)
            return
        # The cache grew by pending + d_1..d_{k-1}; keep pending + the accepted drafts among those.
        kept = min(accepted, k - 1)
        self.lm.rewind(self._cache, (k - 1) - kept)
        self._pending = [token] if accepted < k else [int(self._drafted[-1]), token]
        self._drafted = self._drafted[:0]
