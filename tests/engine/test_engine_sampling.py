"""The engine's sampling path on a stand-in target of fixed logits and a drafter sampling a fixed q.

No model runs, so many seeds are cheap and p, q can be chosen to make a wrong loop visibly biased:
the drafter's uniforms must be independent of the verifier's (one stream, never replayed), each drafted
position is judged with its own uniform, and a correction comes from its own position's residual.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import power_divergence

from specli.engine.drafter import Drafter, Proposal
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig
from specli.engine.stopping import StopCriteria

P = torch.tensor([0.1, 0.2, 0.3, 0.4])  # the target's distribution at every position
Q = torch.tensor(  # the drafter's at the 1st, 2nd, 3rd drafted position of a round
    [
        [0.4, 0.3, 0.2, 0.1],  # mass where p is small: min(1, p/q) = .25, .67, 1, 1
        [0.1, 0.5, 0.1, 0.3],  # residual against P: [0, 0, 2/3, 1/3]
        [0.3, 0.1, 0.5, 0.1],  # residual against P: [0, 1/4, 0, 3/4]
    ]
)
V = P.shape[0]
PROMPT = [0, 1, 2]


class FixedTarget:
    """The target model interface the engine uses (engine/model.py), returning log P at every position;
    the cache is a length."""

    device = output_device = torch.device("cpu")
    vocab_size = V

    def new_cache(self) -> list[int]:
        return [0]

    def forward(self, ids: torch.Tensor, cache: list[int], *, last_only: bool = False) -> torch.Tensor:
        cache[0] += ids.shape[0]
        return P.log().expand(1 if last_only else ids.shape[0], V).clone()  # [n, V]

    def rewind(self, cache: list[int], n: int) -> None:
        assert 0 <= n <= cache[0]
        cache[0] -= n

    def settle(self, cache: list[int]) -> None:
        pass

    def verify_costs(self) -> None:  # no verify prior: the cost model measures as it goes
        return None

    def synchronize(self) -> None:
        pass


class FixedDrafter(Drafter):
    """Drafts position i from Q[i] by inverting its CDF at a uniform from the engine's generator, so a
    verifier whose uniforms replay this stream judges each draft with the very number that drew it."""

    name = "fixed"

    def reset(self, prompt_ids: list[int]) -> None:
        pass

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None) -> Proposal:
        ids = []
        for i in range(k):
            u = torch.rand(1, generator=generator)
            ids.append(min(int(torch.searchsorted(Q[i].cumsum(0), u, right=True)), V - 1))
        return Proposal(torch.tensor(ids), q=Q[:k].clone())

    def commit(self, accepted: int, token: int) -> None:
        pass


def run(seed: int, max_new_tokens: int, k: int):
    config = EngineConfig(
        max_new_tokens=max_new_tokens, num_draft_tokens=k, sampling=SamplingConfig(1.0), seed=seed
    )
    return list(generate_rounds(FixedTarget(), FixedDrafter(), PROMPT, config, StopCriteria(set())))


def g_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    counts, probs = counts.flatten().double(), probs.flatten().double()
    assert counts[probs == 0].sum() == 0, "an impossible outcome occurred"
    keep = probs > 0
    expected = probs[keep] / probs[keep].sum() * counts.sum()
    return float(power_divergence(counts[keep].numpy(), expected.numpy(), lambda_="log-likelihood").pvalue)


def test_first_token_is_the_target_distribution_over_many_seeds():
    """One drafted token a round. A verifier replaying the drafter's random stream accepts token 0 (drawn
    when u < .4) whenever u < .25: P(first = 0) becomes .25 instead of p = .1."""
    n = 4000
    counts = torch.zeros(V)
    for seed in range(n):
        rounds = run(seed, max_new_tokens=2, k=1)
        assert len(rounds[0].drafted) == 1
        counts[rounds[0].committed[0]] += 1
    assert g_pvalue(counts, P) > 1e-3, (counts / n).tolist()


def test_rounds_of_three_drafts_keep_the_target_distribution_and_the_exact_acceptance_lengths():
    """k = 3 in the first round. Accepted = j with prod_{i<j} beta_i (1 - beta_j), beta_i = sum min(p, q_i),
    every uniform its own; the first three tokens are i.i.d. P whatever the drafts were."""
    n = 6000
    lengths = torch.zeros(4)
    joint = torch.zeros(V, V, V)
    for seed in range(n):
        rounds = run(seed, max_new_tokens=4, k=3)
        assert len(rounds[0].drafted) == 3
        lengths[rounds[0].accepted] += 1
        tokens = [t for r in rounds for t in r.committed]
        joint[tokens[0], tokens[1], tokens[2]] += 1
    beta = torch.minimum(P, Q).sum(-1).tolist()  # [0.6, 0.7, 0.6]
    exact_lengths = torch.tensor([math.prod(beta[:j]) * (1 - beta[j]) for j in range(3)] + [math.prod(beta)])
    assert g_pvalue(lengths, exact_lengths) > 1e-3, (lengths / n).tolist()
    exact_joint = P[:, None, None] * P[None, :, None] * P[None, None, :]
    assert g_pvalue(joint, exact_joint) > 1e-3


@pytest.mark.parametrize("position", [0, 1, 2])
def test_fixed_drafter_draws_from_its_q(position):
    """The stand-in itself is honest: position i's drafts follow Q[i] (else the tests above prove nothing)."""
    g = torch.Generator().manual_seed(position)
    counts = torch.zeros(V)
    for _ in range(3000):
        counts[FixedDrafter().propose(3, SamplingConfig(1.0), g).ids[position]] += 1
    assert g_pvalue(counts, Q[position]) > 1e-3
