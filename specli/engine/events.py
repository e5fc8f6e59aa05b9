"""What the engine tells the world: one `Round` per verify step, and `Stats` accumulated from rounds.

Words follow docs/design.md §4: drafted, accepted, rejected, correction, bonus. Metrics (all in `Stats`;
vLLM's through the `SpecCounters` it builds on, engine/counters.py): acceptance rate = accepted / drafted
(vLLM's and llama.cpp's figure); accept_prob α = accepted / (accepted + rejections), the probability that
a draft the target judged is kept (drafts after a rejection are never judged); mean acceptance length
τ = committed tokens / rounds; and the analytic E(α, k) = (1 − α^(k+1)) / (1 − α), τ's expectation when
each judged draft is kept with probability α.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any

from specli.engine.counters import SpecCounters, add_counts
from specli.engine.tree import TreeRecord

if TYPE_CHECKING:  # events stay importable without torch
    from specli.engine.verify import Verdict


class TokenKind(str, Enum):
    """The four kinds of token every view distinguishes."""

    ACCEPTED = "accepted"  # a drafted token the target kept
    REJECTED = "rejected"  # a drafted token the target discarded (shown only in its round)
    CORRECTION = "correction"  # the target's own token at the first rejection
    BONUS = "bonus"  # the target's extra token after a fully accepted draft (plain decoding: every token)


class StopReason(str, Enum):
    EOS = "eos"
    STOP_STRING = "stop_string"
    MAX_NEW_TOKENS = "max_new_tokens"
    CONTEXT = "context"


@dataclass(frozen=True)
class Round:
    """One draft -> verify -> commit step.

    drafted: the draft token ids the target verified (k of them; empty for a plain step).
    draft_probs: q(d) of each drafted token (1.0 for deterministic drafters and greedy drafting).
    target_probs: p(d) of each drafted token (sampling only; empty when greedy).
    target_argmax: the target's argmax at each of the k+1 positions (greedy only).
    accept_probs / uniforms: min(1, p/q) and the uniform draw compared with it (uniforms empty when greedy).
    accepted: how many leading drafted tokens were kept.
    token / kind: the correction (accepted < k) or bonus (accepted == k) the target added.
    committed: the tokens this round appended to the output (accepted drafts + token), cut at a stop.
    stop: why generation ended after this round, or None.
    info: strategy-specific facts for views (e.g. which n-gram matched); JSON-able. A draft cut at
        draft_p_min adds cut_token, cut_prob (its probability, below the threshold) and p_min.
    token_source: the top (id, probability) entries of the distribution `token` came from: the residual
        normalize(max(0, p - q)) after a rejection, p after a fully accepted draft (greedy: the target's
        softmax at that position). Filled only when the engine is asked to (EngineConfig.record_top).
    text: what this round adds to the output text, filled by `Pair.stream` (the engine, which has no
        tokenizer, leaves it ""). Joined over a generation the texts give `Result.text`; a character
        split across rounds appears in the round that completes it.
    prefill_time: the prompt's forward (target and drafter), reported by the first round only.
    draft_limit / draft_reason: the k this round allowed and why (docs/design.md §11): "cost model"
        (the k that maximizes expected tokens per second), "warm-up" (the maximum, before enough rounds
        were measured), "fixed" (--fixed-k), "budget" (the tokens left), or why the drafter proposed
        fewer: "threshold" (draft_p_min), "match" (a lookup match ended), "context".
    tree: a tree round's nodes (`TreeRecord`); None for a chain. A tree round's `drafted` lists every
        node the target verified, the accepted path first (so `drafted[:accepted]` is what it kept),
        then the others in node order; draft_probs and accept_probs follow that order.
    """

    index: int
    drafted: list[int]
    draft_probs: list[float]
    target_probs: list[float]
    target_argmax: list[int]
    accept_probs: list[float]
    uniforms: list[float]
    accepted: int
    token: int
    kind: TokenKind
    committed: list[int]
    draft_time: float
    verify_time: float
    elapsed: float
    stop: StopReason | None = None
    info: dict[str, Any] = field(default_factory=dict)
    token_source: list[tuple[int, float]] = field(default_factory=list)
    text: str = ""
    prefill_time: float = 0.0
    draft_limit: int = 0
    draft_reason: str = ""
    tree: TreeRecord | None = None

    @classmethod
    def from_verdict(
        cls,
        verdict: Verdict,
        *,
        index: int,
        committed: list[int],
        draft_time: float,
        verify_time: float,
        elapsed: float,
        stop: StopReason | None = None,
        info: dict[str, Any] | None = None,
        prefill_time: float = 0.0,
        draft_limit: int = 0,
        draft_reason: str = "",
    ) -> Round:
        """The event for one verified round; `committed` is verdict.committed cut at a stop."""
        return cls(
            index=index,
            drafted=verdict.drafted,
            draft_probs=verdict.draft_probs,
            target_probs=verdict.target_probs,
            target_argmax=verdict.target_argmax,
            accept_probs=verdict.accept_probs,
            uniforms=verdict.uniforms,
            accepted=verdict.accepted,
            token=verdict.token,
            kind=TokenKind.BONUS if verdict.is_bonus else TokenKind.CORRECTION,
            committed=committed,
            draft_time=draft_time,
            verify_time=verify_time,
            elapsed=elapsed,
            stop=stop,
            info=info or {},
            token_source=verdict.token_source,
            prefill_time=prefill_time,
            draft_limit=draft_limit,
            draft_reason=draft_reason,
            tree=verdict.tree,
        )

    @property
    def nodes(self) -> int:
        """Draft tokens the target verified this round: a tree's nodes, a chain's k."""
        return len(self.drafted)

    @property
    def rejected(self) -> list[int]:
        """Drafted tokens discarded this round (empty after a fully accepted draft)."""
        return self.drafted[self.accepted :]

    @property
    def committed_kinds(self) -> list[TokenKind]:
        """The kind of each committed token, aligned with `committed`."""
        kinds = [TokenKind.ACCEPTED] * self.accepted + [self.kind]
        return kinds[: len(self.committed)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind.value
        d["stop"] = self.stop.value if self.stop else None
        d["rejected"] = self.rejected
        if self.tree is None:
            del d["tree"]
        if self.token_source:
            d["token_source"] = [[t, p] for t, p in self.token_source]
        else:
            del d["token_source"]
        return d


def expected_acceptance_length(alpha: float, k: int) -> float:
    """E(α, k) = (1 − α^(k+1)) / (1 − α) (k + 1 at α = 1): the expected tokens per round of k drafts when
    each judged draft is kept with probability α independently (Leviathan et al. 2023). α must be the
    per-judged-draft probability (`Stats.accept_prob`), not accepted / drafted."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@dataclass
class Stats(SpecCounters):
    """Running totals over rounds; `observe` each round as it arrives. Builds on the speculation
    counters (`SpecCounters`: drafts, drafted, accepted, position_accepted, and their rates, the same
    for a server's counters), which the engine always knows, so they start at 0; adds what only the
    engine sees.

    rejections: rounds that ended in a correction after at least one drafted token; each judged exactly
    one draft and refused it, so accepted + rejections is the number of drafts the target judged.
    position_drafted[i]: rounds that drafted position i (so position_drafted[0] = drafts);
    position_judged[i]: rounds whose drafts before position i were all kept. A tree round's positions
    are its depths, and its drafted count is its nodes.
    """

    drafts: int = 0
    drafted: int = 0
    accepted: int = 0
    position_accepted: list[int] = field(default_factory=list)
    rounds: int = 0
    rejections: int = 0
    tokens: int = 0
    draft_time: float = 0.0
    prefill_time: float = 0.0
    verify_time: float = 0.0
    elapsed: float = 0.0
    stop_reason: StopReason | None = None
    position_drafted: list[int] = field(default_factory=list)
    position_judged: list[int] = field(default_factory=list)

    def observe(self, r: Round) -> None:
        self.rounds += 1
        kept = min(r.accepted, len(r.committed))  # drafts a stop (EOS, stop string) cut off were not kept
        depth = r.tree.depth if r.tree is not None else len(r.drafted)  # positions are depths
        self.observe_draft(len(r.drafted), kept, depth)
        self.rejections += int(bool(r.drafted) and r.kind is TokenKind.CORRECTION)  # judged and refused
        self.tokens += len(r.committed)
        self.draft_time += r.draft_time
        self.prefill_time += r.prefill_time
        self.verify_time += r.verify_time
        self.elapsed = r.elapsed
        self.stop_reason = r.stop or self.stop_reason
        grow = depth - len(self.position_drafted)
        if grow > 0:
            self.position_drafted += [0] * grow
            self.position_judged += [0] * grow
        for i in range(depth):
            self.position_drafted[i] += 1
            self.position_judged[i] += i <= r.accepted

    def __add__(self, other: Stats) -> Stats:
        """Two runs' rounds added up, count by count and time by time (per position: the shorter padded
        with 0): the one way runs are totalled (bench's summaries: `sum(runs, Stats())`). elapsed and
        stop_reason belong to one run, so a total has none."""
        if not isinstance(other, Stats):
            return NotImplemented
        return Stats(**{name: add_counts(getattr(self, name), getattr(other, name)) for name in _ADDED})

    @property
    def acceptance_rate(self) -> float:
        """The counters' accepted / drafted, 0.0 when nothing was drafted. Not α."""
        return super().acceptance_rate or 0.0

    @property
    def accept_prob(self) -> float:
        """α = accepted / (accepted + rejections): the probability that a judged draft is kept, the α of
        E(α, k) and of the speedup bound (0.0 when nothing was judged)."""
        judged = self.accepted + self.rejections
        return self.accepted / judged if judged else 0.0

    @property
    def rounds_by_drafted(self) -> list[int]:
        """[j] = rounds that drafted exactly j tokens, j = 0 .. the longest draft (from position_drafted:
        the rounds that drafted position i are those that drafted more than i)."""
        reached = [self.rounds, *self.position_drafted, 0]
        return [reached[j] - reached[j + 1] for j in range(len(reached) - 1)]

    @property
    def expected_tokens_per_round(self) -> float:
        """The mean over rounds of E(α, k) at each round's own drafted k: τ's expectation for these very
        rounds when drafts are kept independently with probability α (0.0 without rounds)."""
        if not self.rounds:
            return 0.0
        alpha = self.accept_prob
        by_k = self.rounds_by_drafted
        return sum(n * expected_acceptance_length(alpha, k) for k, n in enumerate(by_k)) / self.rounds

    @property
    def nodes_per_round(self) -> float:
        """Draft tokens verified per drafting round (a tree's nodes; a chain's k), 0.0 without drafts."""
        return self.drafted / self.drafts if self.drafts else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """Committed tokens per round (plain decoding: 1.0)."""
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def per_position_acceptance(self) -> list[float]:
        """For each draft position i: rounds that accepted position i / rounds that drafted it."""
        pairs = zip(self.position_accepted, self.position_drafted, strict=True)
        return [a / d if d else 0.0 for a, d in pairs]

    @property
    def per_position_accept_prob(self) -> list[float]:
        """For each draft position i: P(d_i kept | d_1..d_{i-1} kept) = accepted at i / judged at i, the α
        of that depth alone (where a parallel drafter's acceptance falls with depth)."""
        judged = self.position_judged + [0] * (len(self.position_accepted) - len(self.position_judged))
        return [a / j if j else 0.0 for a, j in zip(self.position_accepted, judged, strict=False)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "rejections": self.rejections,
            "acceptance_rate": self.acceptance_rate,
            "accept_prob": self.accept_prob,
            "mean_acceptance_length": self.mean_acceptance_length,
            "nodes_per_round": self.nodes_per_round,
            "tokens": self.tokens,
            "tokens_per_second": self.tokens_per_second,
            "elapsed_s": self.elapsed,
            "draft_time_s": self.draft_time,
            "verify_time_s": self.verify_time,
            "per_position_acceptance": self.per_position_acceptance,
            "per_position_accept_prob": self.per_position_accept_prob,
            "stop_reason": self.stop_reason.value if self.stop_reason else None,
        }


# the Stats fields a total adds up (elapsed and stop_reason are one run's)
_ADDED = tuple(f.name for f in fields(Stats) if f.name not in ("elapsed", "stop_reason"))
