"""`lookup` strategy: prompt lookup through a suffix index of prompt + output. No model.

Each draft token continues the longest suffix (between ngram_min and ngram_max tokens) of the text so
far, drafts included, that occurred earlier in prompt + output: of the tokens that followed that suffix,
the most frequent (ties: the most recent), as suffix decoding does. The text then grows by that token
and the next one is matched the same way, so a draft follows an earlier passage while it repeats and
switches to another where the repetition branches.

Cost: committing a token is O(1) amortized plus at most ngram_max - ngram_min + 2 count updates (the
work per token does not grow with the context); each drafted token is O(1) amortized. Memory is linear
in the tokens committed (specli/drafters/suffix_index.py). Only committed tokens enter the index, so a
rejected draft needs no rewind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from specli.drafters.suffix_index import Continuation, SuffixIndex
from specli.engine.drafter import Drafter, Proposal
from specli.engine.sampling import SamplingConfig

if TYPE_CHECKING:
    from specli.pair import Pair
    from specli.settings import Settings


def draft_info(drafted: list[Continuation], context_length: int) -> dict[str, Any]:
    """What a round's views show of a lookup draft: `ngram`, the length of the suffix matched for the
    first token (None: nothing matched); `match_start`, where its latest occurrence followed by that
    token begins; `context_length`, the tokens indexed; `followed`, how often anything followed the
    match, and `chosen`, how often the first drafted token did."""
    if not drafted:
        return {"ngram": None}
    first = drafted[0]
    return {
        "ngram": first.length,
        "match_start": first.start,
        "context_length": context_length,
        "followed": first.total,
        "chosen": first.count,
    }


class PromptLookupDrafter(Drafter):
    """Deterministic proposals (q one-hot) from an incremental suffix index of prompt + output.

    When nothing matches it proposes nothing, and the engine takes a plain target step for that round.
    `draft_state` is "copying" after a round that kept its whole draft, else "searching": the k
    controller estimates acceptance per state (docs/design.md §11).
    """

    name = "lookup"

    def __init__(self, ngram_min: int = 1, ngram_max: int = 3) -> None:
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self._index = SuffixIndex(ngram_min, ngram_max)
        self._drafted: list[int] = []
        self.draft_state = "searching"

    def reset(self, prompt_ids: list[int]) -> None:
        self._index = SuffixIndex(self.ngram_min, self.ngram_max)
        self._index.extend(list(prompt_ids))
        self._drafted = []
        self.draft_state = "searching"

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None) -> Proposal:
        drafted = self._index.draft(k) if k > 0 else []
        self._drafted = [c.token for c in drafted]
        info = draft_info(drafted, len(self._index))
        cut = "match" if len(drafted) < k else None
        return Proposal(torch.tensor(self._drafted, dtype=torch.long), info=info, cut=cut)

    def commit(self, accepted: int, token: int) -> None:
        self._index.extend(self._drafted[:accepted] + [token])
        self.draft_state = "copying" if self._drafted and accepted == len(self._drafted) else "searching"
        self._drafted = []


def build(pair: Pair, settings: Settings, length: int) -> PromptLookupDrafter:
    """Strategy lookup's drafter (the strategy table's factory): an index of prompt + output with the
    settings' n-gram orders; it needs nothing of the pair."""
    return PromptLookupDrafter(settings.ngram_min, settings.ngram_max)
