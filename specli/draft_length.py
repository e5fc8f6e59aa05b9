"""How many tokens to draft this round (docs/design.md §11): the k that maximizes expected tokens per
second, from running estimates of acceptance per draft position and of what drafting and verifying cost.

Expected tokens committed by a round drafting k: E(k) = 1 + sum_{i=1..k} prod_{j<=i} a_j, where a_j is
the probability that draft j is kept given drafts 1..j-1 were (estimated per position, as a running
average over the rounds that judged it). Its cost: draft(k) + verify(k + 1), each a line a + b·n fitted
to the measured times of recent rounds (an autoregressive drafter's draft time grows with k, a parallel
drafter's barely does; verification grows with the tokens checked on a CPU, hardly on a GPU). The
controller picks k in [1, max] maximizing E(k) / cost(k). Any k is lossless: it only decides how many
drafts the target judges.

A drafter may name its state (`draft_state`, read before each round): acceptance is then estimated per
state. Prompt lookup says "copying" after a round whose whole draft was accepted (the text is repeating
an earlier passage, so the next copied tokens are likely right and a long draft pays, as suffix decoding
argues) and "searching" otherwise.

Pure Python, no torch: the engine feeds it each round's k, times and outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PRIOR_ACCEPT = 0.7  # a_j before position j was ever judged
PRIOR_WEIGHT = 2.0  # the prior counts as this many judged rounds
DECAY = 0.97  # per observation: older rounds fade (acceptance and costs drift along a text)
WARMUP_ROUNDS = 3  # rounds at the maximum k before the cost model decides


@dataclass
class _Line:
    """A running weighted least-squares fit y = a + b·x with exponential forgetting."""

    s: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0

    def add(self, x: float, y: float) -> None:
        for name, value in (("s", 1.0), ("sx", x), ("sy", y), ("sxx", x * x), ("sxy", x * y)):
            setattr(self, name, getattr(self, name) * DECAY + value)

    @property
    def seen(self) -> bool:
        return self.s > 0

    def at(self, x: float, slope_if_unknown: float) -> float:
        """The fitted value at x; with one distinct x so far, a line through the mean of slope
        `slope_if_unknown` (relative to the mean y per unit x)."""
        mean_x, mean_y = self.sx / self.s, self.sy / self.s
        var = self.sxx / self.s - mean_x * mean_x
        if var > 1e-6 * max(1.0, mean_x * mean_x):
            slope = (self.sxy / self.s - mean_x * mean_y) / var
            slope = max(0.0, slope)  # cost never falls with more tokens
            return max(0.0, mean_y + slope * (x - mean_x))
        unit = mean_y / mean_x if mean_x > 0 else mean_y
        return max(0.0, mean_y + slope_if_unknown * unit * (x - mean_x))


@dataclass
class DraftLength:
    """Chooses each round's k; `observe` every round (engine-side, after verification).

    max_k: the most a round drafts (--num-draft-tokens). fixed: always max_k (--fixed-k). parallel: the
    drafter proposes all k in one forward, so before the fit knows better, drafting more costs nothing.
    """

    max_k: int
    fixed: bool = False
    parallel: bool = False
    _accepted: dict[str | None, list[float]] = field(default_factory=dict)  # per state: decayed counts
    _judged: dict[str | None, list[float]] = field(default_factory=dict)  # per state and position
    _draft: _Line = field(default_factory=_Line)  # draft seconds vs drafted tokens
    _verify: _Line = field(default_factory=_Line)  # verify seconds vs tokens verified (k + 1)
    _rounds: int = 0

    def __post_init__(self) -> None:
        if self.max_k < 1:
            raise ValueError(f"max_k must be at least 1 (got {self.max_k})")

    def _counts(self, state: str | None) -> tuple[list[float], list[float]]:
        if state not in self._judged:
            self._accepted[state] = [0.0] * self.max_k
            self._judged[state] = [0.0] * self.max_k
        return self._accepted[state], self._judged[state]

    def accept_probs(self, state: str | None = None) -> list[float]:
        """a_1..a_max: the running estimate of P(draft j kept | drafts before it kept) in `state`."""
        accepted, judged = self._counts(state)
        return [
            (acc + PRIOR_ACCEPT * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT)
            for acc, n in zip(accepted, judged, strict=True)
        ]

    def expected_tokens(self, k: int, state: str | None = None) -> float:
        """E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j."""
        total, run = 1.0, 1.0
        for a in self.accept_probs(state)[:k]:
            run *= a
            total += run
        return total

    def cost(self, k: int) -> float | None:
        """Estimated seconds of a round drafting k (None before any round was measured)."""
        if not (self._draft.seen and self._verify.seen):
            return None
        draft = self._draft.at(k, 0.0 if self.parallel else 1.0)
        return draft + self._verify.at(k + 1, 0.1)

    def choose(self, budget: int, state: str | None = None) -> tuple[int, str]:
        """(k, why) for a round that may commit at most `budget` tokens, the drafter being in `state`.
        why: "fixed" (--fixed-k), "budget" (the tokens left cap it), "warm-up" (too few rounds
        measured), "cost model"."""
        cap = min(self.max_k, budget - 1)
        if cap < 1:
            return 0, "budget"
        if self.fixed:
            return cap, "fixed" if cap == self.max_k else "budget"
        if self._rounds < WARMUP_ROUNDS or self.cost(1) is None:
            return cap, "warm-up" if cap == self.max_k else "budget"
        rates = [
            (self.expected_tokens(k, state) / max(self.cost(k) or 0.0, 1e-12), k) for k in range(1, cap + 1)
        ]
        best = max(rates)[1]
        return best, "budget" if best == cap < self.max_k else "cost model"

    def observe(
        self, drafted: int, accepted: int, draft_time: float, verify_time: float, state: str | None = None
    ) -> None:
        """One verified round: how many were drafted and kept, and what drafting and verifying took."""
        kept, judged = self._counts(state)
        for i in range(self.max_k):  # every position fades: one not drafted for long drifts to the prior
            judged[i] *= DECAY
            kept[i] *= DECAY
        for i in range(min(drafted, accepted + 1, self.max_k)):  # positions the target judged
            judged[i] += 1.0
            kept[i] += float(i < accepted)
        if drafted > 0:
            self._draft.add(drafted, draft_time)
            self._rounds += 1
        self._verify.add(drafted + 1, verify_time)
