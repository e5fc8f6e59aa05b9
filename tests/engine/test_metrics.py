"""The metrics in `Stats`: acceptance rate (accepted / drafted), α = accept_prob (accepted / (accepted +
rejections), the probability that a judged draft is kept) and E(α, k), checked against a drafter whose
per-token acceptance probability is known, run through the real engine."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest
import torch

from specli.engine.counters import SpecCounters
from specli.engine.drafter import Drafter, Proposal
from specli.engine.events import Round, Stats, StopReason, TokenKind, expected_acceptance_length
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig
from specli.engine.stopping import StopCriteria

V = 16  # vocabulary of the stand-in models
K = 4


class SuccessorTarget:
    """A stand-in target model (engine/model.py) whose greedy next token after t is (t + 1) mod V,
    whatever came before."""

    device = output_device = torch.device("cpu")
    vocab_size = V

    def new_cache(self) -> list[int]:
        return []

    def forward(self, ids: torch.Tensor, cache: list[int], *, last_only: bool = False) -> torch.Tensor:
        cache.extend(ids.tolist())
        logits = torch.zeros(len(ids), V)  # [n, V]
        logits[torch.arange(len(ids)), (ids + 1) % V] = 4.0
        return logits[-1:] if last_only else logits

    @staticmethod
    def rewind(cache: list[int], n: int) -> None:
        del cache[len(cache) - n :]

    @staticmethod
    def settle(cache: list[int]) -> None:
        pass

    @staticmethod
    def synchronize() -> None:
        pass


class BernoulliDrafter(Drafter):
    """Proposes the target's argmax with probability alpha and another token otherwise, independently at
    every position (each draft continues its own chain, which is what the target judges next)."""

    name = "bernoulli"

    def __init__(self, alpha: float, seed: int) -> None:
        self.alpha = alpha
        self.rng = random.Random(seed)
        self.last = 0

    def reset(self, prompt_ids: list[int]) -> None:
        self.last = prompt_ids[-1]

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None) -> Proposal:
        ids, current = [], self.last
        for _ in range(k):
            right = (current + 1) % V
            current = right if self.rng.random() < self.alpha else (right + 1 + self.rng.randrange(V - 1)) % V
            ids.append(current)
        return Proposal(torch.tensor(ids, dtype=torch.long))

    def commit(self, accepted: int, token: int) -> None:
        self.last = token


def run_synthetic(alpha: float, max_new_tokens: int, seed: int = 0) -> list[Round]:
    """Greedy speculative generation with the stand-ins: every judged draft is accepted w.p. alpha."""
    config = EngineConfig(  # k drafts every round: the counts below assume it
        max_new_tokens=max_new_tokens, num_draft_tokens=K, sampling=SamplingConfig(), fixed_k=True
    )
    drafter = BernoulliDrafter(alpha, seed)
    return list(generate_rounds(SuccessorTarget(), drafter, [3], config, StopCriteria(set())))


def stats_of(rounds: list[Round]) -> Stats:
    stats = Stats()
    for r in rounds:
        stats.observe(r)
    return stats


def make_round(drafted: int, accepted: int) -> Round:
    kind = TokenKind.BONUS if accepted == drafted else TokenKind.CORRECTION
    return Round(
        index=0, drafted=list(range(drafted)), draft_probs=[1.0] * drafted, target_probs=[],
        target_argmax=[], accept_probs=[], uniforms=[], accepted=accepted, token=99, kind=kind,
        committed=list(range(accepted)) + [99], draft_time=0.0, verify_time=0.0, elapsed=0.0,
    )  # fmt: skip


# --------------------------------------------------------------------------- definitions


def test_stats_counts_rejections_and_both_rates():
    """A rejection is a round that ended in a correction after >= 1 draft; plain steps are none."""
    stats = stats_of([make_round(4, 2), make_round(4, 4), make_round(0, 0), make_round(3, 0)])
    assert stats.rejections == 2
    assert stats.accepted == 6 and stats.drafted == 11
    assert stats.acceptance_rate == pytest.approx(6 / 11)
    assert stats.accept_prob == pytest.approx(6 / 8)  # 8 judged drafts: 6 kept, 2 refused
    d = stats.to_dict()
    assert d["rejections"] == 2 and d["accept_prob"] == pytest.approx(0.75)
    assert d["acceptance_rate"] == pytest.approx(6 / 11)
    assert Stats().accept_prob == 0.0 and stats_of([make_round(0, 0)]).accept_prob == 0.0


def test_expected_acceptance_length():
    assert expected_acceptance_length(0.0, 4) == 1.0
    assert expected_acceptance_length(1.0, 4) == 5.0
    assert expected_acceptance_length(0.5, 2) == pytest.approx(1.75)
    assert expected_acceptance_length(0.8, 4) == pytest.approx(1 + 0.8 + 0.64 + 0.512 + 0.4096)


# --------------------------------------------------------------------------- one counter type


def test_engine_stats_and_a_servers_counters_are_one_core():
    """The engine's Stats and what bench --endpoint reads back from specli serve (its spec_decode object
    and its Prometheus counters) are the same SpecCounters: the same counts and the same rates, by the
    vLLM definitions. Bug caught: either side computing a rate its own way (e.g. acceptance length as
    τ = tokens / rounds, or per-position acceptance over the rounds that drafted each position), or
    a round that drafted nothing counted as a draft."""
    pytest.importorskip("prometheus_client")
    from specli.bench.endpoint import prometheus_counts, response_counts
    from specli.bench.run import speculation_metrics
    from specli.serve.metrics import Metrics
    from specli.serve.report import Outcome, spec_decode

    stats = stats_of([make_round(4, 2), make_round(4, 4), make_round(0, 0), make_round(3, 0)])
    assert (stats.drafts, stats.drafted, stats.accepted) == (3, 11, 6) == (stats.position_drafted[0], 11, 6)
    assert stats.position_accepted == [2, 2, 1, 1]
    metrics = Metrics(4, running=lambda: 0, waiting=lambda: 0)
    metrics.observe(Outcome("r", "/v1/completions", 5, stats, "stop", "draft", 4, None, 0.0, 0.1, 0.2))
    served = json.loads(json.dumps({"choices": [], "spec_decode": spec_decode(stats, "draft", 4)}))
    read_back = [response_counts(served).counters, prometheus_counts(metrics.exposition().decode()).counters]
    for counters in read_back:
        assert counters == SpecCounters(3, 11, 6, [2, 2, 1, 1])
        assert counters.acceptance_rate == stats.acceptance_rate == pytest.approx(6 / 11)
        assert counters.acceptance_length == stats.acceptance_length == pytest.approx(1 + 6 / 3)
        expected = pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
        assert counters.per_position_acceptance_rate == stats.per_position_acceptance_rate == expected
        assert speculation_metrics(counters) == speculation_metrics(stats)


def test_counters_know_nothing_until_they_count():
    """A bare SpecCounters reports nothing (every count None, every rate None); observing a draft counts
    from 0; a round that drafted nothing is no draft; Stats' acceptance rate is 0.0 where the counters'
    is None (nothing drafted)."""
    c = SpecCounters()
    assert not c.reported and c.acceptance_rate is None and c.acceptance_length is None
    c.observe_draft(0, 0)
    assert not c.reported
    c.observe_draft(3, 1)
    c.observe_draft(2, 2)
    assert (c.drafts, c.drafted, c.accepted, c.position_accepted) == (2, 5, 3, [2, 1, 0])
    assert c.acceptance_length == pytest.approx(2.5) and c.per_position_acceptance_rate == [1.0, 0.5, 0.0]
    assert Stats().acceptance_rate == 0.0 and Stats().acceptance_length is None


# --------------------------------------------------------------------------- a drafter of known alpha


@pytest.mark.parametrize("alpha", [0.5, 0.8])
def test_accept_prob_recovers_alpha_and_E_matches_tau(alpha):
    """Thousands of judged drafts, each kept w.p. alpha: α̂ = accept_prob lands within 4 binomial standard
    errors of alpha while accepted/drafted lies far below it, and E(α̂, k) matches the measured mean
    acceptance length τ (rounds that drafted the full k) within sampling error; E(accepted/drafted, k)
    does not."""
    rounds = run_synthetic(alpha, max_new_tokens=7000, seed=int(alpha * 100))
    stats = stats_of(rounds)
    judged = stats.accepted + stats.rejections
    assert judged > 5000
    assert judged == sum(min(r.accepted + 1, len(r.drafted)) for r in rounds)  # every judged draft counted
    se_alpha = math.sqrt(alpha * (1 - alpha) / judged)
    assert abs(stats.accept_prob - alpha) < 4 * se_alpha, (stats.accept_prob, alpha, se_alpha)
    assert stats.acceptance_rate < alpha - 10 * se_alpha  # the drafts after a rejection were never judged

    full = [len(r.committed) for r in rounds if len(r.drafted) == K and r.stop is None]
    tau = statistics.fmean(full)
    se_tau = statistics.stdev(full) / math.sqrt(len(full))
    slope = (expected_acceptance_length(alpha + 1e-4, K) - expected_acceptance_length(alpha - 1e-4, K)) / 2e-4
    tolerance = 4 * math.hypot(se_tau, slope * se_alpha)
    assert abs(expected_acceptance_length(alpha, K) - tau) < 4 * se_tau  # the model E describes holds here
    assert abs(expected_acceptance_length(stats.accept_prob, K) - tau) < tolerance, (tau, stats.accept_prob)
    assert tau - expected_acceptance_length(stats.acceptance_rate, K) > 3 * tolerance


# --------------------------------------------------------------------------- a real pair


def test_stats_of_a_real_generation(tiny_pair):
    """On real models (greedy): rejections are exactly the correction rounds that drafted, the JSON carries
    both rates, and accept_prob >= acceptance_rate."""
    import specli

    target, draft = tiny_pair
    pair = specli.load(target=str(target), draft=str(draft), device="cpu")
    result = pair.generate(prompt_ids=[5, 6, 7], max_new_tokens=40, num_draft_tokens=3)
    s = result.stats
    corrections = [r for r in result.rounds if r.drafted and r.kind is TokenKind.CORRECTION]
    assert s.rejections == len(corrections) > 0
    assert s.accepted + s.rejections == sum(min(r.accepted + 1, len(r.drafted)) for r in result.rounds)
    assert s.accept_prob == pytest.approx(s.accepted / (s.accepted + s.rejections))
    assert s.accept_prob >= s.acceptance_rate
    stats = result.to_dict()["stats"]
    assert stats["rejections"] == s.rejections and stats["accept_prob"] == s.accept_prob
    assert stats["acceptance_rate"] == s.acceptance_rate


def test_drafts_cut_off_by_a_stop_are_not_counted_as_accepted():
    """A final round whose 3 accepted drafts were cut after the first by a stop string keeps 1 draft."""
    cut = Round(
        index=0, drafted=[5, 6, 7], draft_probs=[1.0] * 3, target_probs=[], target_argmax=[5, 6, 7, 8],
        accept_probs=[1.0] * 3, uniforms=[], accepted=3, token=8, kind=TokenKind.BONUS, committed=[5],
        draft_time=0.0, verify_time=0.0, elapsed=0.0, stop=StopReason.STOP_STRING,
    )  # fmt: skip
    stats = Stats()
    stats.observe(cut)
    assert (stats.accepted, stats.drafted, stats.tokens) == (1, 3, 1)
    assert stats.position_accepted == [1, 0, 0]


def test_accept_prob_by_position_counts_only_judged_drafts():
    """Position i is judged only when the drafts before it were kept: two rounds of k=3, one rejecting
    at position 2 and one accepting all, give α by position [1, 1/2, 1/1] (not accepted/drafted)."""

    def round_(accepted: int) -> Round:
        return Round(
            index=0, drafted=[5, 6, 7], draft_probs=[1.0] * 3, target_probs=[], target_argmax=[5, 6, 7, 8],
            accept_probs=[1.0] * 3, uniforms=[], accepted=accepted, token=8,
            kind=TokenKind.BONUS if accepted == 3 else TokenKind.CORRECTION,
            committed=[5, 6, 7, 8][: accepted + 1], draft_time=0.0, verify_time=0.0, elapsed=0.0,
        )  # fmt: skip

    stats = Stats()
    stats.observe(round_(1))
    stats.observe(round_(3))
    assert stats.position_judged == [2, 2, 1]
    assert stats.per_position_accept_prob == [1.0, 0.5, 1.0]
    assert stats.per_position_acceptance == [1.0, 0.5, 0.5]


def test_stats_add_up_as_if_every_round_were_observed_by_one():
    """Bug caught: a total of runs (bench's summaries) that drops a count or a time (rejections,
    prefill_time, per-position judged), adds positions misaligned, or keeps one run's elapsed."""
    first = [make_round(4, 4), make_round(2, 0), make_round(0, 0)]
    second = [make_round(3, 1), make_round(5, 2)]
    one, two, both = stats_of(first), stats_of(second), stats_of(first + second)
    one.prefill_time, two.prefill_time, both.prefill_time = 0.5, 0.25, 0.75
    total = sum([one, two], Stats())
    assert isinstance(total, Stats)
    both.elapsed, both.stop_reason = 0.0, None  # one run's, so a total has none
    assert total == both
    assert total.position_judged == both.position_judged and len(total.position_drafted) == 5
