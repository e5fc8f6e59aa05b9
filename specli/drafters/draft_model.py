"""`draft` strategy: a small model sharing the target's tokenizer proposes k tokens autoregressively."""

from __future__ import annotations

import torch

from specli.cached_lm import CachedLM
from specli.drafters.base import Proposal
from specli.sampling import SamplingConfig, choose


def recent_window(max_positions: int) -> int:
    """How many recent tokens a draft model keeps once the context outgrows it: 3/4 of its own."""
    return max(1, max_positions * 3 // 4)


class DraftModelDrafter:
    """Drafts with its own KV cache. Per round: k forwards; the last drafted token is fed next round.

    Cache invariant: the cache holds every committed token except `pending` (tokens the drafter has not
    yet run: the last correction/bonus, preceded by the final draft token after a fully accepted round).
    """

    name = "draft"

    def __init__(self, lm: CachedLM, target_vocab: int, max_positions: int | None = None) -> None:
        self.lm = lm
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

    def commit(self, accepted: int, token: int) -> None:
        k = self._drafted.shape[0]
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
