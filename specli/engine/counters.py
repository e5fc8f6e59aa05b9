"""The speculation counters every report is made of, as vLLM keeps them (`SpecDecodingStats`): one type for
the engine's rounds (`Stats` builds on it) and for what a server reports (bench --endpoint). Counts and
derived rates only; each view formats them (the summary line, JSON, Prometheus).

Words (design.md §4): drafts = rounds that drafted at least one token (vLLM's num_drafts); drafted = draft
tokens sent to the target, those after a rejection included (num_draft_tokens); accepted = drafted tokens
kept, bonus and correction excluded (num_accepted_tokens); position_accepted[i] = rounds whose draft
position i (0-based) was kept (num_accepted_tokens_per_pos).

A count is None when its source did not report it (a server that does not say); a counter that did not
grow is 0. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass
class SpecCounters:
    """Speculation counters over some rounds or requests; `observe_draft` each round that drafted.
    SpecCounters() knows nothing (every count None); observing counts from 0."""

    drafts: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    position_accepted: list[int] | None = None

    def observe_draft(self, drafted: int, accepted: int, depth: int | None = None) -> None:
        """One round's draft: `drafted` tokens sent to the target, the first `accepted` of them kept (a
        tree's: its nodes, and the accepted path's length; positions then count depths up to `depth`).
        A round that drafted nothing is no draft."""
        if drafted <= 0:
            return
        self.drafts = (self.drafts or 0) + 1
        self.drafted = (self.drafted or 0) + drafted
        self.accepted = (self.accepted or 0) + accepted
        if self.position_accepted is None:
            self.position_accepted = []
        positions = self.position_accepted
        positions += [0] * ((depth or drafted) - len(positions))  # as long as the longest draft
        for i in range(accepted):
            positions[i] += 1

    @property
    def reported(self) -> bool:
        """Whether any count is known."""
        return any(getattr(self, f) is not None for f in COUNTS)

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted, vLLM's and llama.cpp's "draft acceptance rate" (None when either is not
        known or nothing was drafted). It counts the drafts after a rejection, which the target never
        judged, as failures: never feed it to E(α, k) (that takes `Stats.accept_prob`)."""
        if self.accepted is None or not self.drafted:
            return None
        return self.accepted / self.drafted

    @property
    def acceptance_length(self) -> float | None:
        """1 + accepted / drafts, vLLM's "mean acceptance length": tokens per drafting round, bonus or
        correction included (None when not known or nothing was drafted). Not τ = committed tokens /
        rounds (`Stats.mean_acceptance_length`), which counts the rounds that drafted nothing too."""
        if self.accepted is None or not self.drafts:
            return None
        return 1 + self.accepted / self.drafts

    @property
    def per_position_acceptance_rate(self) -> list[float] | None:
        """position_accepted[i] / drafts, vLLM's per-position acceptance rate (None when not known or
        nothing was drafted). `Stats.per_position_acceptance` divides by the rounds that drafted
        position i instead."""
        if self.position_accepted is None or not self.drafts:
            return None
        return [n / self.drafts for n in self.position_accepted]

    def __add__(self, other: SpecCounters) -> SpecCounters:
        """The counters of both, count by count; one a side does not know is the other's (per position:
        the shorter padded with 0). Gives bare SpecCounters whatever the operands are."""
        return SpecCounters(**{f: add_counts(getattr(self, f), getattr(other, f)) for f in COUNTS})

    def fill(self, other: SpecCounters) -> SpecCounters:
        """These counters, with `other`'s where these are not known."""
        return SpecCounters(**{f: _either(getattr(self, f), getattr(other, f)) for f in COUNTS})

    def since(self, before: SpecCounters) -> SpecCounters:
        """The growth from `before` of cumulative counters (a Prometheus scrape): a count `before` lacks
        grows from 0; one that went down (the server restarted) or is not known now is None."""
        values: dict[str, Any] = {}
        for f in ("drafts", "drafted", "accepted"):
            now, then = getattr(self, f), getattr(before, f) or 0
            values[f] = now - then if now is not None and now >= then else None
        now_pos, then_pos = self.position_accepted, before.position_accepted or []
        if now_pos is not None and len(now_pos) >= len(then_pos):
            grown = [n - (then_pos[i] if i < len(then_pos) else 0) for i, n in enumerate(now_pos)]
            values["position_accepted"] = grown if min(grown, default=0) >= 0 else None
        return SpecCounters(**values)


COUNTS = tuple(f.name for f in fields(SpecCounters))  # drafts, drafted, accepted, position_accepted


def add_counts(a: Any, b: Any) -> Any:
    """a + b for counts (None: not known, the other's) and per-position lists (padded with 0)."""
    if a is None or b is None:
        return _either(a, b)
    if isinstance(a, list):
        width = max(len(a), len(b))
        return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(width)]
    return a + b


def _either(a: Any, b: Any) -> Any:
    """a when known, else b (a list copied: no two counters share one)."""
    value = a if a is not None else b
    return list(value) if isinstance(value, list) else value
