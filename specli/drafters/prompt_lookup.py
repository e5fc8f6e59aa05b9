"""`lookup` strategy: prompt lookup through a suffix index of prompt + output. No model.

A draft follows the passage the text is repeating. Its first token continues the longest suffix of the
text (between ngram_min and ngram_max tokens, default 1 and 32) that occurred earlier in prompt + output:
of the tokens that followed that suffix, the most frequent (ties: the most recent), as suffix decoding
does. The text then grows by that token and the next one is matched the same way, so the matched
suffix grows by one token a step along the occurrence being copied: once it is a few tokens long it
occurs only in that passage, and the draft copies the passage token by token for as long as it goes
on. Where earlier occurrences of the match disagree on what follows, the frequency statistics decide
(and a tree branches there).

How long a round drafts is the cost model's (specli/engine/draft_length.py), from acceptance measured
per `draft_state`: the length of the suffix the first drafted token was matched by, in buckets
(`MATCH_STATES`). A long match is a copy in progress and earns long drafts; a one-token match rarely
continues and, where a verify of several tokens costs more than it commits, earns a plain round.

Cost: committing a token is O(1) amortized plus at most ngram_max - ngram_min + 2 count updates (the
work per token does not grow with the context); each drafted token is O(1) amortized. Memory is linear
in the tokens committed (specli/drafters/suffix_index.py). Only committed tokens enter the index, so a
rejected draft needs no rewind.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import torch

from specli.drafters.suffix_index import Continuation, SuffixIndex
from specli.engine.drafter import Drafter, Proposal
from specli.engine.sampling import SamplingConfig
from specli.engine.tree import ROOT, TreeGrowth, grow, subtree
from specli.strategies import LOOKUP_NGRAM_MAX

if TYPE_CHECKING:
    from specli.drafters.context import DraftContext


# draft_state by the length of the suffix the first drafted token was matched by: (shortest length, label)
MATCH_STATES = ((16, "match 16+"), (8, "match 8-15"), (4, "match 4-7"), (2, "match 2-3"), (1, "match 1"))
NO_MATCH = "no match"
DRAWN_FOLLOWERS = 64  # the most followers a drawn tree's node draws among (its q's support)
# each state's acceptance before its rounds are measured, from greedy continuations of the engine
# bench's 12 prompts (SmolLM2-135M and Gemma 3 270M, 16 drafted a round: the first draft was kept in
# 18-36 % of the rounds after a one-token match, 58-70 % after 2-3 tokens, 80-100 % after 4-15 and
# 97-100 % after 16 or more, which kept 14 of 15 drafted tokens), rounded down: a one-token match
# rarely continues, a long one nearly always.
STATE_PRIORS = MappingProxyType(
    {"match 1": 0.2, "match 2-3": 0.5, "match 4-7": 0.8, "match 8-15": 0.9, "match 16+": 0.95}
)


def match_state(length: int | None) -> str:
    """The cost model's state for a draft whose first token was matched by a suffix of `length` tokens
    (None: nothing matched)."""
    for shortest, label in MATCH_STATES:
        if length is not None and length >= shortest:
            return label
    return NO_MATCH


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
    `draft_state` is the bucket of the current match's length (`match_state`): the k controller
    estimates acceptance per state (docs/design.md §11). `model_free`: a round that drafts nothing costs
    it nothing, so the controller may choose plain rounds where drafting does not pay.
    """

    name = "lookup"
    model_free = True
    state_priors = STATE_PRIORS

    def __init__(
        self,
        ngram_min: int = 1,
        ngram_max: int = LOOKUP_NGRAM_MAX,
        tree_size: int = 0,
        tree_width: int = 2,
        vocab_size: int = 0,
    ) -> None:
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self.tree_size = tree_size  # > 0: token trees of up to that many nodes (docs/design.md §14)
        self.tree_width = tree_width
        self.vocab_size = vocab_size  # the target's: rows of q for drawn children
        self.tree_draws = vocab_size > 0  # under sampling its children are drawn from its statistics
        self._index = SuffixIndex(ngram_min, ngram_max)
        self._drafted: list[int] = []

    def reset(self, prompt_ids: list[int]) -> None:
        self._index = SuffixIndex(self.ngram_min, self.ngram_max)
        self._index.extend(list(prompt_ids))
        self._drafted = []

    @property
    def draft_state(self) -> str:
        """The bucket of the length of the suffix the next draft's first token would be matched by."""
        found = self._index.continuation(self._index.tail)
        return match_state(found.length if found is not None else None)

    def propose(
        self,
        k: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        nodes: int = 0,
        shape: Sequence[int] | None = None,
    ) -> Proposal:
        if nodes and k > 0 and self.tree_draws and not sampling.greedy:
            return self._propose_drawn_tree(k, nodes, generator, shape)
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
        info = draft_info(index.draft(1), len(index)) | {"tree": len(keep)}
        if not keep:
            return Proposal(torch.empty(0, dtype=torch.long), info=info, cut="match")
        probs = [growth.probs[i] for i in keep]
        return Proposal(
            torch.tensor(self._drafted, dtype=torch.long), info=info, parents=parents, probs=probs
        )

    def _propose_drawn_tree(
        self, k: int, size: int, generator: torch.Generator | None, shape: Sequence[int] | None
    ) -> Proposal:
        """Under sampling: a tree whose children are DRAWN (without replacement) from the lookup's own
        statistics, q = the shares `followers` gives the tokens that followed the node's longest matched
        suffix (and, escaped, the shorter ones'), normalised; judged by the multi-candidate rule
        (`engine.tree.grow`; `shape` as the cost model chose it). Nothing matched: no draft."""
        index = self._index
        matches = {ROOT: index.tail}

        def statistics(node: int) -> torch.Tensor:  # [V] the node's followers' shares, normalised
            row = torch.zeros(self.vocab_size)
            found = index.followers(matches[node], DRAWN_FOLLOWERS)
            if found:
                row[[token for token, _ in found]] = torch.tensor([share for _, share in found])
                row /= row.sum()
            return row

        def expand(frontier: list[int], growth: TreeGrowth) -> torch.Tensor:
            for node in frontier:
                matches[node] = index.step(matches[growth.parents[node]], growth.tokens[node])
            return torch.stack([statistics(node) for node in frontier])  # [w, V]

        first = statistics(ROOT)
        info = draft_info(index.draft(1), len(index))
        if not first.any():
            self._drafted = []
            return Proposal(torch.empty(0, dtype=torch.long), info=info | {"tree": 0}, cut="match")
        tokens, parents, probs, q = grow(
            first, expand, k, self.tree_width, size, generator, drawn=True, shape=shape
        )
        self._drafted = tokens
        ids = torch.tensor(tokens, dtype=torch.long)
        return Proposal(ids, q, info | {"tree": len(tokens)}, parents=parents, probs=probs)

    def commit(self, accepted: int, token: int) -> None:
        self._commit(self._drafted[:accepted], token)

    def commit_tree(self, path: list[int], token: int) -> None:
        self._commit([self._drafted[i] for i in path], token)

    def _commit(self, kept: list[int], token: int) -> None:
        """The kept drafts and `token` enter the index."""
        self._index.extend(kept + [token])
        self._drafted = []


def build(context: DraftContext, length: int) -> PromptLookupDrafter:
    """Strategy lookup's drafter (the strategy table's factory): an index of prompt + output with the
    settings' n-gram orders; it needs no model."""
    settings = context.settings
    return PromptLookupDrafter(
        settings.ngram_min,
        settings.ngram_max,
        settings.tree,
        settings.tree_width,
        vocab_size=context.target.vocab_size,
    )
