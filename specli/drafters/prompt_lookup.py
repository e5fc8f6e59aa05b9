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
from specli.engine.tree import ROOT, TreeGrowth, depths, subtree

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

    def __init__(
        self, ngram_min: int = 1, ngram_max: int = 3, tree_size: int = 0, tree_width: int = 2
    ) -> None:
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self.tree_size = tree_size  # > 0: token trees of up to that many nodes (docs/design.md §14)
        self.tree_width = tree_width
        self._index = SuffixIndex(ngram_min, ngram_max)
        self._drafted: list[int] = []
        self._tree_depth = 0  # the last tree's depth
        self.draft_state = "searching"

    def reset(self, prompt_ids: list[int]) -> None:
        self._index = SuffixIndex(self.ngram_min, self.ngram_max)
        self._index.extend(list(prompt_ids))
        self._drafted = []
        self.draft_state = "searching"

    def propose(
        self, k: int, sampling: SamplingConfig, generator: torch.Generator | None, nodes: int = 0
    ) -> Proposal:
        if nodes and k > 0:
            return self._propose_tree(k, nodes)
        drafted = self._index.draft(k) if k > 0 else []
        self._drafted = [c.token for c in drafted]
        info = draft_info(drafted, len(self._index))
        cut = "match" if len(drafted) < k else None
        return Proposal(torch.tensor(self._drafted, dtype=torch.long), info=info, cut=cut)

    def _propose_tree(self, k: int, size: int) -> Proposal:
        """A tree of depth <= k (SuffixDecoding): each node's children are the tokens that most often
        followed the longest matched suffix of the text plus its path, each weighted by its share of
        those occurrences; depth by depth the `tree_width` likeliest paths branch, then the `tree_size`
        likeliest nodes stay. Nothing matched: no draft (a plain step)."""
        index, growth = self._index, TreeGrowth()
        matches = {ROOT: index.tail}

        def branch(parent: int) -> list[int]:
            found = index.followers(matches[parent], self.tree_width)
            added = growth.add_children(parent, [t for t, _ in found], [share for _, share in found])
            for node in added:
                matches[node] = index.step(matches[parent], growth.tokens[node])
            return added

        growth.newest = branch(ROOT)
        for _ in range(1, k):
            growth.newest = [node for parent in growth.frontier(self.tree_width) for node in branch(parent)]
            if not growth.newest:
                break
        keep = growth.select(size)
        parents = subtree(growth.parents, keep)
        self._drafted = [growth.tokens[i] for i in keep]
        self._tree_depth = max(depths(parents), default=0)
        info = draft_info(index.draft(1), len(index)) | {"tree": len(keep)}
        if not keep:
            return Proposal(torch.empty(0, dtype=torch.long), info=info, cut="match")
        probs = [growth.probs[i] for i in keep]
        return Proposal(
            torch.tensor(self._drafted, dtype=torch.long), info=info, parents=parents, probs=probs
        )

    def commit(self, accepted: int, token: int) -> None:
        self._commit(self._drafted[:accepted], token, bool(self._drafted) and accepted == len(self._drafted))

    def commit_tree(self, path: list[int], token: int) -> None:
        kept = [self._drafted[i] for i in path]
        self._commit(kept, token, bool(kept) and len(kept) >= self._tree_depth)

    def _commit(self, kept: list[int], token: int, whole: bool) -> None:
        """The kept drafts and `token` enter the index; `whole`: the draft was kept as deep as it went
        (the text is copying)."""
        self._index.extend(kept + [token])
        self.draft_state = "copying" if whole else "searching"
        self._drafted = []


def build(pair: Pair, settings: Settings, length: int) -> PromptLookupDrafter:
    """Strategy lookup's drafter (the strategy table's factory): an index of prompt + output with the
    settings' n-gram orders; it needs nothing of the pair."""
    return PromptLookupDrafter(settings.ngram_min, settings.ngram_max, settings.tree, settings.tree_width)
