"""How many tokens to draft this round (docs/design.md §11): the k that maximizes expected tokens per
second, from running estimates of acceptance per draft position and of what drafting and verifying cost.

Expected tokens committed by a round drafting k: E(k) = 1 + sum_{i=1..k} prod_{j<=i} a_j, where a_j is
the probability that draft j is kept given drafts 1..j-1 were (estimated per position, as a running
average over the rounds that judged it; a position not yet judged is assumed as good as the judged
ones on average). Its cost: draft(k) + verify(k + 1). An autoregressive drafter's draft time is its
measured time per drafted token times k, a parallel drafter's its measured time per round whatever k;
verification is a line a + b·n through the running mean verify time of each n seen so far (it grows
with the tokens checked on a CPU, hardly on a GPU). The controller picks k in [1, max] maximizing
E(k) / cost(k). Any k is lossless: it only decides how many drafts the target judges.

A drafter may name its state (`draft_state`, read before each round): acceptance is then estimated per
state. Prompt lookup names the length of the suffix its draft was matched by (a long match is a copy in
progress, whose next tokens are likely right so a long draft pays, as suffix decoding argues; a
one-token match rarely continues).

Plain rounds: where a one-token forward's time is known (measured at load, the llama.cpp engine's
`verify_prior`; or, for a drafter that drafts without a model, the running mean of its plain rounds,
else the verify line at one token), a round drafts nothing when 1 / plain time beats the best k's
expected rate, and after PLAIN_RETRY such rounds in a row one drafting round measures acceptance again;
each retry that leaves plain rounds still paying more doubles the wait before the next (up to
PLAIN_RETRY_MAX: a drafter that never pays on this text costs one measuring round in hundreds, not one in
17), and a round where drafting pays on its own resets it.

Whether a round drafts a token tree at all (a drafter that can, under --tree) is decided before it
drafts, from what each kind of round delivered: the decayed committed tokens per second of the recent
tree rounds against the chain rounds', the better kind unless the other was not tried for
EXPLORE_EVERY rounds (trees cost more drafting and a longer verify; whether their longer accepted paths
pay depends on the hardware: hardly on a small target whose verify grows with its tokens).

A token tree's size is chosen the same way, after the drafter grew it (docs/design.md §14): the
expected tokens of keeping a set S of its nodes are 1 + Σ_{i∈S} a(P(i)), P(i) the product of draft
probabilities along node i's path and a(P) the share of verified nodes with a path probability within
a factor 2 of P that ended on the accepted path (calibrated against what was accepted; P itself is the
prior); its cost is the round's draft time plus the verify line at |S| + 1 tokens. The candidates are
the N best nodes for every N (closed under ancestors) and the best chain of every depth; the best
tokens per second wins, the smaller on a tie.

Under sampling a tree of drawn children (SpecInfer's form) may not be pruned by its own tokens, so its
shape is chosen BEFORE drafting, from past rounds only (Sequoia's way; `choose_shape`): a node at depth
d drawn r-th among its siblings ends on the accepted path with probability V(parent) · P(d, r),
P(d, r) = a(d, r) · Π_{s<r} (1 - a(d, s)), where a(d, r) is the estimated acceptance of the r-th draw
given the draws before it were refused (a(d, 1) the chain's a_d: a lone draw is a chain's draft). The
shape grows best-first by that value (at most `width` children a node and expanded nodes a depth), and
the size with the most expected tokens per second wins; when that shape is a chain, or promises less
than SHAPE_MARGIN times the chain of the round's k, the round drafts the chain.

Pure Python, no torch: the engine feeds it each round's k, times and outcome.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specli.engine.tree import ROOT, children, depths, path_probabilities, path_to, ranked_nodes

if TYPE_CHECKING:
    from specli.engine.tree import TreeRecord

PRIOR_ACCEPT = 0.7  # the pooled acceptance before any draft was judged
POOLED_WEIGHT = 2.0  # ... counting as this many judged drafts
PRIOR_WEIGHT = 8.0  # a position's estimate leans on the pooled one as if it were this many rounds
DECAY = 0.98  # per observation: older rounds fade (acceptance and costs drift along a text)
WARMUP_ROUNDS = 3  # rounds at the maximum k before the cost model decides
EXPLORE_EVERY = 16  # rounds of one kind (tree or chain) before the other is tried again
MODE_DECAY = 0.98  # per round of that kind: a long average (a round's tokens vary with the text, and
# a short one flips to trees on a stretch where chains happened to do badly)
TREE_PRIOR_WEIGHT = 2.0  # a score bin's prior (the score itself) counts as this many verified nodes
TREE_DECAY = 0.995  # per tree round: a round verifies many nodes, so the bins forget more slowly
TREE_MIN_BIN = -16  # path probabilities below 2^-16 share one bin
VERIFY_SLOPE = 0.05  # until two lengths were verified: each more token costs 5 % of a verify (a CPU's)
PRIOR_VERIFY_WEIGHT = 2.0  # a verify time measured at load counts as this many rounds of that length
PLAIN_RETRY = 16  # plain rounds in a row (a cost model that stopped drafting) before a draft is tried
PLAIN_RETRY_MAX = 256  # the longest wait, after retries that did not pay
RANK_PRIOR = 0.3  # a second draw's acceptance, the first refused, before any was judged
SHAPE_MARGIN = 1.15  # a drawn tree must promise this much more than the chain: its estimate is noisier
SHAPE_EXPLORE = 64  # chain rounds in a row before a drawn tree is tried as if it cost no more than a chain


@dataclass
class _Costs:
    """Running means (exponential forgetting) of draft time per unit (a drafted token, or a round for a
    parallel drafter) and of verify time per number of tokens verified."""

    parallel: bool
    draft_sum: float = 0.0
    draft_units: float = 0.0
    verify: dict[int, list[float]] = field(default_factory=dict)  # n -> [decayed time sum, weight]

    def add(self, drafted: int, draft_time: float, verify_time: float, verified: int | None = None) -> None:
        """One round: `drafted` draft steps (a tree's depth), `verified` tokens in the verify forward
        (default drafted + 1)."""
        if drafted > 0:
            self.draft_sum = self.draft_sum * DECAY + draft_time
            self.draft_units = self.draft_units * DECAY + (1.0 if self.parallel else drafted)
        for entry in self.verify.values():
            entry[0] *= DECAY
            entry[1] *= DECAY
        entry = self.verify.setdefault(verified or drafted + 1, [0.0, 0.0])
        entry[0] += verify_time
        entry[1] += 1.0

    @property
    def seen(self) -> bool:
        return self.draft_units > 0 and bool(self.verify)

    def draft(self, k: int) -> float:
        if self.draft_units <= 0:  # nothing drafted yet (costs from a verify prior): priced on first use
            return 0.0
        unit = self.draft_sum / self.draft_units
        return unit if self.parallel else unit * k

    def verify_line(self) -> tuple[float, float]:
        """(intercept, slope) of verify time against tokens verified: weighted least squares through
        the per-n means of the rounds that drafted (n >= 2; 1-token plain steps only while no round
        drafted); with one n, a slope of VERIFY_SLOPE of that mean per token; never decreasing in n."""
        points = [(m, total / w, w) for m, (total, w) in self.verify.items() if w > 1e-9]
        # choose() prices drafting rounds only (n >= 2): a plain step's 1-token verify often takes a
        # cheaper path (no mask, one row of logits), and fitted with them it would steepen the slope
        drafted = [p for p in points if p[0] > 1]
        if drafted:
            points = drafted
        weight = sum(w for *_, w in points)
        mean_n = sum(m * w for m, _, w in points) / weight
        mean_t = sum(t * w for _, t, w in points) / weight
        var = sum(w * (m - mean_n) ** 2 for m, _, w in points) / weight
        if var > 1e-9:
            slope = sum(w * (m - mean_n) * (t - mean_t) for m, t, w in points) / weight / var
        else:
            slope = VERIFY_SLOPE * mean_t
        slope = max(0.0, slope)
        return mean_t - slope * mean_n, slope

    def round_times(self, cap: int) -> list[float]:
        """draft(k) + verify(k + 1) for k = 1..cap, seconds."""
        intercept, slope = self.verify_line()
        return [self.draft(k) + max(0.0, intercept + slope * (k + 1)) for k in range(1, cap + 1)]


@dataclass
class TreeChoice:
    """Tree rounds against chain rounds: the decayed committed tokens and draft + verify seconds of each
    kind. A pair keeps one per settings across its generations (`Pair.stream`), so the warm-up is paid
    once, not per prompt."""

    modes: dict[bool, list[float]] = field(default_factory=dict)  # tree? -> [tokens, seconds, rounds]
    since: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})  # rounds since each kind

    def use_tree(self) -> bool:
        """WARMUP_ROUNDS of trees, then of chains; then the kind with the higher measured tokens per
        second, the other one round in EXPLORE_EVERY."""
        for tree in (True, False):
            if self.modes.get(tree, [0.0, 0.0, 0])[2] < WARMUP_ROUNDS:
                return tree
        for tree in (True, False):
            if self.since[not tree] >= EXPLORE_EVERY:
                return not tree
        rates = {tree: tokens / max(seconds, 1e-12) for tree, (tokens, seconds, _) in self.modes.items()}
        return rates[True] > rates[False]

    def observe(self, tree: bool, tokens: int, seconds: float) -> None:
        entry = self.modes.setdefault(tree, [0.0, 0.0, 0])
        entry[0] = entry[0] * MODE_DECAY + tokens
        entry[1] = entry[1] * MODE_DECAY + seconds
        entry[2] += 1
        self.since[tree] = 0
        self.since[not tree] += 1


@dataclass
class DrawnTrees:
    """What rounds of drawn-children trees taught (`DraftLength.choose_shape`), kept by a pair across
    its generations: per (depth, rank) the decayed [kept, tried] draws; the decayed seconds those trees
    took beyond a chain round's fixed part (the chain's draft time at their depth and its verify
    intercept) and the tokens they verified, whose ratio prices a tree's verified token; and how many
    such trees were verified."""

    ranks: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    seconds: float = 0.0
    tokens: float = 0.0
    rounds: int = 0


@dataclass
class DraftLength:
    """Chooses each round's k; `observe` every round (engine-side, after verification).

    max_k: the most a round drafts (--num-draft-tokens). fixed: always max_k (--fixed-k). parallel: the
    drafter proposes all k in one forward, so before the fit knows better, drafting more costs nothing.
    skip: rounds may draft nothing (k = 0) where a plain step pays more (a drafter that drafts without
    a model: nothing to catch up after a plain round); a verify_prior allows it too.
    """

    max_k: int
    fixed: bool = False
    parallel: bool = False
    # seconds of a forward of n tokens, measured at load (LlamaLM.verify_costs): the verify line's prior,
    # and rounds may then draft nothing (k = 0, a plain step) where drafting does not pay
    verify_prior: dict[int, float] | None = None
    skip: bool = False
    # the pooled acceptance to start from per drafter state (the drafter's `state_priors`; a state not
    # named starts from PRIOR_ACCEPT)
    state_priors: Mapping[str, float] | None = None
    _plain_streak: int = 0
    _retry_after: int = PLAIN_RETRY  # plain rounds in a row before the next retry (doubles, module docstring)
    _retrying: bool = False  # the last round was a retry
    _accepted: dict[str | None, list[float]] = field(default_factory=dict)  # per state: decayed counts
    _judged: dict[str | None, list[float]] = field(default_factory=dict)  # per state and position
    _costs: _Costs = field(init=False)
    _rounds: int = 0
    _tree_bins: dict[int, list[float]] = field(default_factory=dict)  # score bin -> [accepted, seen], decayed
    _tree_rounds: int = 0
    drawn: DrawnTrees = field(default_factory=DrawnTrees)  # trees of drawn children, measured
    _shapeless: int = 0  # rounds since a drawn tree was chosen
    trees: TreeChoice = field(default_factory=TreeChoice)  # tree against chain rounds, measured

    def __post_init__(self) -> None:
        if self.max_k < 1:
            raise ValueError(f"max_k must be at least 1 (got {self.max_k})")
        self._costs = _Costs(self.parallel)
        for n, seconds in (self.verify_prior or {}).items():
            self._costs.verify[n] = [seconds * PRIOR_VERIFY_WEIGHT, PRIOR_VERIFY_WEIGHT]

    def begin(self) -> None:
        """A new generation starts: what was learned (acceptance, costs, trees) stays; a streak of plain
        rounds does not (the new text may be worth drafting from its first round); the retry wait does."""
        self._plain_streak, self._retrying = 0, False

    def _counts(self, state: str | None) -> tuple[list[float], list[float]]:
        if state not in self._judged:
            self._accepted[state] = [0.0] * self.max_k
            self._judged[state] = [0.0] * self.max_k
        return self._accepted[state], self._judged[state]

    def accept_probs(self, state: str | None = None) -> list[float]:
        """a_1..a_max: the running estimate of P(draft j kept | drafts before it kept) in `state`; the
        prior of each is the state's acceptance over all positions (before any: the state's prior, else
        PRIOR_ACCEPT)."""
        accepted, judged = self._counts(state)
        total = sum(judged)
        start = (self.state_priors or {}).get(state, PRIOR_ACCEPT) if state is not None else PRIOR_ACCEPT
        prior = (sum(accepted) + start * POOLED_WEIGHT) / (total + POOLED_WEIGHT)
        return [
            (acc + prior * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT) for acc, n in zip(accepted, judged, strict=True)
        ]

    def _expected(self, cap: int, state: str | None) -> list[float]:
        """E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j for k = 0..cap."""
        totals, run = [1.0], 1.0
        for a in self.accept_probs(state)[:cap]:
            run *= a
            totals.append(totals[-1] + run)
        return totals

    def expected_tokens(self, k: int, state: str | None = None) -> float:
        """E(k): the tokens a round drafting k is expected to commit."""
        return self._expected(k, state)[k]

    def cost(self, k: int) -> float | None:
        """Estimated seconds of a round drafting k (None before any round was measured)."""
        return self._costs.round_times(k)[-1] if self._costs.seen else None

    def choose(self, budget: int, state: str | None = None) -> tuple[int, str]:
        """(k, why) for a round that may commit at most `budget` tokens, the drafter being in `state`.
        why: "fixed" (--fixed-k), "budget" (the tokens left cap it), "warm-up" (too few rounds
        measured), "cost model"."""
        cap = min(self.max_k, budget - 1)
        forced = self._forced(cap)
        if forced is not None:
            return forced
        expected, times = self._expected(cap, state), self._costs.round_times(cap)
        rates = [(expected[k] / max(times[k - 1], 1e-12), k) for k in range(1, cap + 1)]
        best_rate, best = max(rates, key=lambda rate: (rate[0], -rate[1]))  # the smallest k on a tie
        may_skip = self.skip or self.verify_prior is not None
        if may_skip and 1.0 / max(self._plain_time(), 1e-12) >= best_rate:
            if self._retrying:  # the retry did not make drafting pay: wait twice as long before the next
                self._retry_after, self._retrying = min(2 * self._retry_after, PLAIN_RETRY_MAX), False
            self._plain_streak += 1
            if self._plain_streak <= self._retry_after:  # then one drafting round, to measure again
                return 0, "cost model: plain pays more"
            self._retrying = True
        else:  # drafting pays on its own
            self._retry_after, self._retrying = PLAIN_RETRY, False
        self._plain_streak = 0
        return best, "budget" if best == cap < self.max_k else "cost model"

    def _forced(self, cap: int) -> tuple[int, str] | None:
        """(k, why) where the costs do not decide: no room (budget), --fixed-k, or too few rounds measured
        (warm-up: the maximum, so the costs get measured); else None."""
        if cap < 1:
            return 0, "budget"
        if self.fixed:
            return cap, "fixed" if cap == self.max_k else "budget"
        if (self._rounds < WARMUP_ROUNDS and self.verify_prior is None) or not self._costs.verify:
            return cap, "warm-up" if cap == self.max_k else "budget"
        return None

    def choose_with_prompt(self, budget: int, state: str | None = None) -> tuple[int, str]:
        """(k, why) for a round whose forward is the prompt's own (the torch engine's first round,
        docs/design.md §3): there a draft costs its row of that forward (the verify line's slope) and
        its drafting, not a forward of its own, so k grows while the chance that its last draft is kept,
        a_1 · ... · a_k, beats what the draft costs in one-token steps. The maximum while warming up."""
        cap = min(self.max_k, budget - 1)
        forced = self._forced(cap)
        if forced is not None:
            return forced
        step = max(self._plain_time(), 1e-12)
        price = (self._costs.verify_line()[1] + self._costs.draft(1)) / step  # one more draft, in steps
        k, kept = 0, 1.0
        for a in self.accept_probs(state)[:cap]:
            kept *= a
            if kept <= price:
                break
            k += 1
        return k, "budget" if k == cap < self.max_k else "cost model"

    def _plain_time(self) -> float:
        """Seconds of a one-token forward: its running mean (the load's measurement as the prior)."""
        total, weight = self._costs.verify.get(1, (0.0, 0.0))
        if weight > 1e-9:
            return total / weight
        intercept, slope = self._costs.verify_line()
        return intercept + slope

    def share_trees(self, other: DraftLength) -> None:
        """Learn trees with `other` from now on (a seeded sampled generation starts its k from the priors
        but not its trees): the tree-against-chain rounds, the draws' acceptance by depth and rank and
        what drawn trees cost beyond chains are the same objects, updated by both."""
        self.trees, self.drawn = other.trees, other.drawn

    def use_tree(self) -> bool:
        """Whether this round drafts a tree (the drafter can): always when fixed, else `TreeChoice`."""
        return self.fixed or self.trees.use_tree()

    def observe_round(self, tree: bool, tokens: int, seconds: float) -> None:
        """A drafting round's kind (tree or chain), committed tokens and draft + verify seconds."""
        self.trees.observe(tree, tokens, seconds)

    def node_acceptance(self, score: float) -> float:
        """P(a node of path probability `score` ends on the accepted path): the decayed share of the
        verified nodes of scores near it (a factor-2 bin) that were, with the score itself as the prior,
        worth TREE_PRIOR_WEIGHT nodes. Drafters are rarely calibrated (a distilled draft model spreads
        its probability yet ranks the target's token first), so the score ranks and history prices."""
        slot = _score_bin(score)
        accepted, seen = self._tree_bins.get(slot, (0.0, 0.0))
        prior = min(1.0, 2.0 ** (slot + 0.5))
        return (accepted + prior * TREE_PRIOR_WEIGHT) / (seen + TREE_PRIOR_WEIGHT)

    def choose_nodes(
        self, parents: Sequence[int], probs: Sequence[float] | None, draft_time: float
    ) -> list[int]:
        """The nodes of a drafted tree (parents, each node's draft probability) to verify this round:
        all of them when fixed or warming up, else the candidate with the most expected tokens per
        second (module docstring). Ascending, closed under ancestors."""
        n = len(parents)
        if probs is None or self.fixed or self._tree_rounds < WARMUP_ROUNDS or not self._costs.seen:
            return list(range(n))
        scores = path_probabilities(parents, probs)
        worth = [self.node_acceptance(score) for score in scores]
        intercept, slope = self._costs.verify_line()

        def rate(size: int, value: float) -> float:
            return (1.0 + value) / max(draft_time + intercept + slope * (size + 1), 1e-12)

        # the best n nodes for every n: the prefixes of one ranking, valued by a running sum
        ranked = ranked_nodes(parents, scores)
        best, best_rate, value = ranked, -1.0, 0.0
        for size, node in enumerate(ranked, 1):
            value += worth[node]
            if rate(size, value) > best_rate:  # strictly: the smaller wins a tie
                best, best_rate = ranked[:size], rate(size, value)
        by_depth: dict[int, int] = {}  # and the best chain of every depth
        for node, depth in enumerate(depths(parents)):
            if depth not in by_depth or scores[node] > scores[by_depth[depth]]:
                by_depth[depth] = node
        for node in by_depth.values():
            chain = path_to(parents, node)
            chain_rate = rate(len(chain), sum(worth[i] for i in chain))
            if chain_rate > best_rate or (chain_rate == best_rate and len(chain) < len(best)):
                best, best_rate = chain, chain_rate
        return sorted(best)

    def rank_acceptance(self, depth: int, rank: int, state: str | None = None) -> float:
        """a(d, r): P(the r-th child drawn at depth d is accepted | its parent was and the draws before it
        were refused). Rank 1 is the chain's a_d; a later rank is its decayed share of judged draws at
        that depth, leaning (PRIOR_WEIGHT) on that rank's share over all depths (`_rank_prior`)."""
        if rank == 1:
            return self.accept_probs(state)[depth - 1]
        return self._rank_estimate(depth, rank, self._rank_prior(rank))

    def _rank_estimate(self, depth: int, rank: int, prior: float) -> float:
        kept, judged = self.drawn.ranks.get((depth, rank), (0.0, 0.0))
        return (kept + prior * PRIOR_WEIGHT) / (judged + PRIOR_WEIGHT)

    def _rank_prior(self, rank: int) -> float:
        """A rank's pooled acceptance over all depths, starting from the rank before it (rank 2: from
        RANK_PRIOR): a later draw is rarely kept more often than the one before it."""
        start = RANK_PRIOR if rank == 2 else self._rank_prior(rank - 1)
        pooled = [entry for (_, r), entry in self.drawn.ranks.items() if r == rank]
        kept = sum(entry[0] for entry in pooled)
        return (kept + start * POOLED_WEIGHT) / (sum(entry[1] for entry in pooled) + POOLED_WEIGHT)

    def choose_shape(
        self, k: int, budget: int, width: int, size: int, state: str | None = None
    ) -> list[int] | None:
        """The shape of this round's tree of drawn children (parents of a rank tree, `grow_shaped_tree`),
        or None when the chain of k (the round's `choose`) is expected to pay as much (module
        docstring). At most `size` nodes, depth min(max_k, budget - 1), `width` children a node and
        `width` nodes expanded a depth. The first WARMUP_ROUNDS trees take all `size` nodes (their
        worth and cost get measured); then a verified token costs what drawn trees took beyond a chain
        round's fixed part per token they verified, or the chain's verify slope when that is more (the
        chain's slope alone after SHAPE_EXPLORE rounds without a tree, so an estimate from a few early
        trees is retried). Before the costs are measured: None."""
        cap = min(self.max_k, budget - 1)
        if k < 1 or cap < 1 or width < 2 or not self._costs.seen:
            return None
        self._shapeless += 1
        explore = self._shapeless > SHAPE_EXPLORE  # the extra cost is re-measured now and then
        shape = self._best_first(cap, width, size, state)
        warm_up = [parent for parent, _, _ in shape]
        if self.drawn.rounds < WARMUP_ROUNDS and any(len(kids) > 1 for kids in children(warm_up)):
            self._shapeless = 0
            return warm_up  # the first trees are all `size` nodes: what they deliver and cost is measured
        intercept, slope = self._costs.verify_line()
        if self.drawn.tokens > 1e-9 and not explore:  # what a drawn tree's verified token costs
            slope = max(slope, self.drawn.seconds / self.drawn.tokens)
        best, best_rate, value = 0, 0.0, 0.0
        deepest = 0
        for n, (_, node_value, depth) in enumerate(shape, 1):
            value += node_value
            deepest = max(deepest, depth)
            rate = (1.0 + value) / max(self._costs.draft(deepest) + intercept + slope * (n + 1), 1e-12)
            if rate > best_rate:
                best, best_rate = n, rate
        parents = [parent for parent, _, _ in shape[:best]]
        chain = self.expected_tokens(k, state) / max(self._costs.round_times(k)[-1], 1e-12)
        if best_rate <= chain * SHAPE_MARGIN or all(len(kids) <= 1 for kids in children(parents)):
            return None
        self._shapeless = 0
        return parents

    def _best_first(self, cap: int, width: int, size: int, state: str | None) -> list[tuple[int, float, int]]:
        """Up to `size` shape nodes, best first: (parent, value V, depth), each after its parent and its
        earlier siblings. V(node) = V(parent) · P(depth, rank)."""
        firsts = self.accept_probs(state)  # a(d, 1)
        priors = {rank: self._rank_prior(rank) for rank in range(2, width + 1)}
        memo: dict[tuple[int, int], float] = {}

        def accept(depth: int, rank: int) -> float:  # a(d, r), as `rank_acceptance`
            return firsts[depth - 1] if rank == 1 else self._rank_estimate(depth, rank, priors[rank])

        def share(depth: int, rank: int) -> float:  # P(d, r): the r-th draw is the one accepted
            if (depth, rank) not in memo:
                refused = 1.0
                for r in range(1, rank):
                    refused *= 1.0 - accept(depth, r)
                memo[depth, rank] = refused * accept(depth, rank)
            return memo[depth, rank]

        out: list[tuple[int, float, int]] = []
        expanded: dict[int, set[int]] = {}  # depth -> the parents given children there
        heap = [(-share(1, 1), 0, ROOT, 1, 1, 1.0)]  # (-V, tiebreak, parent, depth, rank, V(parent))
        ties = 1
        while heap and len(out) < size:
            negative, _, parent, depth, rank, base = heapq.heappop(heap)
            at_depth = expanded.setdefault(depth, set())
            if parent not in at_depth and len(at_depth) >= width:
                continue  # this depth expands `width` nodes already
            at_depth.add(parent)
            node = len(out)
            out.append((parent, -negative, depth))
            if rank < width:  # its next sibling
                heapq.heappush(heap, (-base * share(depth, rank + 1), ties, parent, depth, rank + 1, base))
                ties += 1
            if depth < cap:  # its first child
                heapq.heappush(heap, (negative * share(depth + 1, 1), ties, node, depth + 1, 1, -negative))
                ties += 1
        return out

    def observe_tree(self, tree: TreeRecord) -> None:
        """A verified tree round: each node's score bin learns whether it ended on the accepted path."""
        for entry in self._tree_bins.values():
            entry[0] *= TREE_DECAY
            entry[1] *= TREE_DECAY
        kept = set(tree.path)
        for node, score in enumerate(path_probabilities(tree.parents, tree.draft_probs)):
            entry = self._tree_bins.setdefault(_score_bin(score), [0.0, 0.0])
            entry[0] += node in kept
            entry[1] += 1.0
        self._tree_rounds += 1

    def observe(
        self,
        drafted: int,
        accepted: int,
        draft_time: float,
        verify_time: float,
        state: str | None = None,
        verified: int | None = None,
        tree: TreeRecord | None = None,
        accept_probs: Sequence[float] | None = None,
        timed: bool = True,
    ) -> None:
        """One verified round: how many were drafted (a tree's depth) and kept, what drafting and
        verifying took, and how many tokens the verify forward ran (default drafted + 1). A tree of drawn
        children (`tree.sampled`) teaches each draw's acceptance by depth and rank instead (`rank_outcomes`:
        its first draws are a chain's drafts). `accept_probs`: a chain's chance of keeping each draft
        (the verdict's min(1, p/q); greedy: 1 or 0, the outcome itself): each judged position learns its
        chance instead of its 0-or-1 outcome, whose mean it is (sampled rounds estimate acceptance with
        less noise, greedy ones as before). timed False: its times are not a round's (the first round's
        forward carried the prompt): acceptance is learned, costs are not."""
        kept, judged = self._counts(state)
        for i in range(self.max_k):  # every position fades: one not drafted for long drifts to the prior
            judged[i] *= DECAY
            kept[i] *= DECAY
        if tree is not None and tree.sampled:
            self._learn_drawn(tree, kept, judged, drafted, draft_time + verify_time)
        else:
            for i in range(min(drafted, accepted + 1, self.max_k)):  # positions the target judged
                judged[i] += 1.0
                kept[i] += accept_probs[i] if accept_probs is not None else float(i < accepted)
            if timed:
                self._costs.add(drafted, draft_time, verify_time, verified)
        self._rounds += drafted > 0 and timed  # the warm-up counts rounds whose costs were measured

    def _learn_drawn(
        self, tree: TreeRecord, kept: list[float], judged: list[float], depth: int, seconds: float
    ) -> None:
        """A verified tree of drawn children: its first draws are chain drafts (positions), later ones
        teach their (depth, rank); its draft + verify `seconds` beyond a chain round's fixed part, per
        verified token, price a tree's token (wider drafts, a masked verify)."""
        for entry in self.drawn.ranks.values():
            entry[0] *= TREE_DECAY
            entry[1] *= TREE_DECAY
        for d, rank, ok in rank_outcomes(tree):
            if rank == 1 and d <= self.max_k:
                judged[d - 1] += 1.0
                kept[d - 1] += float(ok)
            elif rank > 1:
                entry = self.drawn.ranks.setdefault((d, rank), [0.0, 0.0])
                entry[0] += float(ok)
                entry[1] += 1.0
        if self._costs.seen:
            fixed = self._costs.draft(depth) + self._costs.verify_line()[0]
            self.drawn.seconds = self.drawn.seconds * TREE_DECAY + seconds - fixed
            self.drawn.tokens = self.drawn.tokens * TREE_DECAY + tree.size + 1
            self.drawn.rounds += 1


def rank_outcomes(tree: TreeRecord) -> list[tuple[int, int, bool]]:
    """The judged draws of a verified tree: (depth, rank among its siblings, accepted) for each child of
    the root and of the accepted path's nodes that the target tried."""
    rows = children(tree.parents)
    out = []
    for depth, parent in enumerate([ROOT, *tree.path], 1):
        for rank, node in enumerate(rows[parent + 1], 1):
            if tree.status[node] == "unjudged":
                break
            out.append((depth, rank, tree.status[node] == "accepted"))
    return out


def _score_bin(score: float) -> int:
    """The factor-2 bin of a path probability: floor(log2(score)), in [TREE_MIN_BIN, -1]."""
    if score <= 0:
        return TREE_MIN_BIN
    return max(TREE_MIN_BIN, min(-1, math.floor(math.log2(score))))
