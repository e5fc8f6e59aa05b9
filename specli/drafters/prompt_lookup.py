"""`lookup` strategy: prompt lookup. Copy what followed the most recent earlier occurrence of the latest
n-gram of prompt + output, trying n from ngram_max down to ngram_min. No model.

Cost: the index maps each n-gram (n in ngram_min..ngram_max) to the end of its most recent occurrence.
Committing a token inserts ngram_max - ngram_min + 1 keys (work per token does not grow with context);
a lookup is ngram_max - ngram_min + 1 dictionary probes plus copying up to k ids. Memory grows linearly
with context: at most (ngram_max - ngram_min + 1) keys per token.
"""

from __future__ import annotations

import torch

from specli.drafters.base import Proposal
from specli.sampling import SamplingConfig


class NgramIndex:
    """Tokens so far, and n-gram -> end index of its latest occurrence that is not the sequence's end."""

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max (got {ngram_min}, {ngram_max})")
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self.tokens: list[int] = []
        self._latest: dict[tuple[int, ...], int] = {}

    def append(self, token: int) -> None:
        """Add one token; n-grams ending at the previous last position become findable."""
        end = len(self.tokens) - 1
        for n in range(self.ngram_min, min(self.ngram_max, end + 1) + 1):
            self._latest[tuple(self.tokens[end - n + 1 : end + 1])] = end
        self.tokens.append(token)

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            self.append(token)

    def match(self, k: int) -> tuple[list[int], int, int] | None:
        """(continuation of up to k ids, n, start index of the earlier occurrence) or None."""
        length = len(self.tokens)
        for n in range(min(self.ngram_max, length), self.ngram_min - 1, -1):
            end = self._latest.get(tuple(self.tokens[length - n :]))
            if end is not None:
                return self.tokens[end + 1 : end + 1 + k], n, end - n + 1
        return None


class PromptLookupDrafter:
    """Deterministic proposals (q one-hot) from an incremental n-gram index of prompt + output.

    When nothing matches it proposes nothing, and the engine takes a plain target step for that round.
    """

    name = "lookup"

    def __init__(self, ngram_min: int = 1, ngram_max: int = 3) -> None:
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self._index = NgramIndex(ngram_min, ngram_max)
        self._drafted: list[int] = []
        self.draft_state = "searching"  # "copying" after a round that kept its whole draft (§11)

    def reset(self, prompt_ids: list[int]) -> None:
        self._index = NgramIndex(self.ngram_min, self.ngram_max)
        self._index.extend(list(prompt_ids))
        self._drafted = []
        self.draft_state = "searching"

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None) -> Proposal:
        found = self._index.match(k) if k > 0 else None
        if found is None:
            self._drafted = []
            return Proposal(torch.empty(0, dtype=torch.long), info={"ngram": None}, cut="match")
        ids, n, start = found
        self._drafted = ids
        info = {"ngram": n, "match_start": start, "context_length": len(self._index.tokens)}
        return Proposal(torch.tensor(ids, dtype=torch.long), info=info, cut="match" if len(ids) < k else None)

    def commit(self, accepted: int, token: int) -> None:
        self._index.extend(self._drafted[:accepted] + [token])
        self.draft_state = "copying" if self._drafted and accepted == len(self._drafted) else "searching"
        self._drafted = []
