"""Verification on hand-made distributions (docs/design.md §3.3)."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import power_divergence

from specli.engine.verify import (
    acceptance_probabilities,
    residual_distribution,
    token_distribution,
    verify_greedy,
    verify_sampling,
)

P = torch.tensor([0.6, 0.3, 0.1])
Q = torch.tensor([0.5, 0.4, 0.1])


def test_worked_example_acceptance_and_residual():
    accept = acceptance_probabilities(P, Q)  # every token's min(1, p/q)
    assert accept.tolist() == pytest.approx([1.0, 0.75, 1.0])
    assert residual_distribution(P, Q).tolist() == pytest.approx([1.0, 0.0, 0.0])


def test_worked_example_rejection_frequency_and_correction():
    """Drafting token 1 (q=.4, p=.3) is accepted 75% of the time; every correction is token 0."""
    p = torch.stack([P, P])  # [k+1, V] with k = 1
    q = Q[None]  # [k, V]
    g = torch.Generator().manual_seed(0)
    n, accepted, corrections = 4000, 0, set()
    for _ in range(n):
        v = verify_sampling(torch.tensor([1]), q, p, g)
        if v.accepted:
            accepted += 1
        else:
            corrections.add(v.token)
        assert v.accept_probs == pytest.approx([0.75])
        assert v.draft_probs == pytest.approx([0.4]) and v.target_probs == pytest.approx([0.3])
    assert abs(accepted / n - 0.75) < 0.03
    assert corrections == {0}


def test_target_probability_zero_is_always_rejected():
    p = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    q = torch.tensor([[0.2, 0.2, 0.6]])
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        v = verify_sampling(torch.tensor([2]), q, p, g)
        assert v.accepted == 0 and v.token in (0, 1) and v.accept_probs == [0.0]


def test_equal_distributions_always_accept_and_bonus_comes_from_last_position():
    p = torch.tensor([[0.2, 0.3, 0.5], [0.2, 0.3, 0.5], [0.0, 0.0, 1.0]])
    q = p[:2].clone()
    g = torch.Generator().manual_seed(2)
    for d in ([0, 1], [2, 2], [1, 0]):
        v = verify_sampling(torch.tensor(d), q, p, g)
        assert v.accepted == 2 and v.is_bonus and v.token == 2
    assert residual_distribution(p[0], q[0]).tolist() == pytest.approx(p[0].tolist())  # zero residual -> p


def test_one_hot_q_deterministic_drafter():
    """q one-hot at d: accept with probability p(d); the correction is p with d removed."""
    p = torch.tensor([[0.5, 0.25, 0.25], [1.0, 0.0, 0.0]])
    q = torch.nn.functional.one_hot(torch.tensor([0]), 3).float()
    assert acceptance_probabilities(p[0, :1], q[0, :1]).tolist() == [0.5]
    assert residual_distribution(p[0], q[0]).tolist() == pytest.approx([0.0, 0.5, 0.5])
    g = torch.Generator().manual_seed(3)
    outcomes = [verify_sampling(torch.tensor([0]), q, p, g) for _ in range(4000)]
    rate = sum(v.accepted for v in outcomes) / len(outcomes)
    assert abs(rate - 0.5) < 0.03
    assert {v.token for v in outcomes if not v.accepted} == {1, 2}


def test_deterministic_draft_without_q_is_the_one_hot_rule():
    """q None (what `verify` passes for a deterministic drafter, never building [k, V] one-hot rows):
    accept d with probability p(d); the correction comes from p without d; the bonus from p_{k+1}."""
    p = torch.tensor([[0.5, 0.25, 0.25], [0.0, 0.0, 1.0]])
    g = torch.Generator().manual_seed(4)
    outcomes = [verify_sampling(torch.tensor([0]), None, p, g) for _ in range(4000)]
    assert all(v.draft_probs == [1.0] and v.target_probs == pytest.approx([0.5]) for v in outcomes)
    rate = sum(v.accepted for v in outcomes) / len(outcomes)
    assert abs(rate - 0.5) < 0.03
    corrections = [v.token for v in outcomes if not v.accepted]
    assert set(corrections) == {1, 2} and abs(corrections.count(1) / len(corrections) - 0.5) < 0.05
    assert {v.token for v in outcomes if v.accepted} == {2}  # the bonus row, not the drafted one
    one_hot = torch.nn.functional.one_hot(torch.tensor([0]), 3).float()
    rejected = next(v for v in outcomes if not v.accepted)
    implied = token_distribution(rejected, p, None)
    torch.testing.assert_close(implied, token_distribution(rejected, p, one_hot))


def test_first_rejection_stops_acceptance():
    """A later draft token is never accepted after an earlier rejection."""
    p = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    v = verify_sampling(torch.tensor([0, 1]), q, p, torch.Generator().manual_seed(0))
    assert v.accepted == 0 and v.token == 1 and v.drafted == [0, 1]


def test_greedy_verify():
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 9.0]])  # argmax 1, 0, 2
    v = verify_greedy(torch.tensor([1, 0]), logits)
    assert (v.accepted, v.token, v.is_bonus) == (2, 2, True)
    v = verify_greedy(torch.tensor([1, 2]), logits)
    assert (v.accepted, v.token, v.is_bonus) == (1, 0, False)
    v = verify_greedy(torch.tensor([2, 0]), logits)
    assert (v.accepted, v.token) == (0, 1)
    assert v.target_argmax == [1, 0, 2] and v.accept_probs == [0.0, 1.0]
    v = verify_greedy(torch.empty(0, dtype=torch.long), logits[:1])  # plain step: a bonus from p_1
    assert (v.accepted, v.token, v.is_bonus) == (0, 1, True)


def test_plain_sampling_step_draws_from_p():
    p = torch.tensor([[0.0, 0.0, 1.0]])
    v = verify_sampling(
        torch.empty(0, dtype=torch.long), torch.empty(0, 3), p, torch.Generator().manual_seed(0)
    )
    assert (v.accepted, v.token, v.is_bonus) == (0, 2, True)


# --------------------------------------------------------------------------- k >= 2 (docs/design.md §3)
# Hand-made p, q for k = 3 where every position differs: position i's residual normalize(max(0, p_i - q_i))
# is far from normalize(max(0, p_i - q_0)), and the acceptance probabilities are moderate, so a residual
# taken from the wrong position, or one uniform shared by all positions, shows in the frequencies.

P3 = torch.tensor(
    [
        [0.10, 0.20, 0.30, 0.40],
        [0.40, 0.30, 0.20, 0.10],
        [0.25, 0.25, 0.25, 0.25],
        [0.10, 0.10, 0.10, 0.70],  # the bonus position
    ]
)
Q3 = torch.tensor(
    [
        [0.40, 0.30, 0.20, 0.10],
        [0.10, 0.20, 0.30, 0.40],
        [0.70, 0.10, 0.10, 0.10],
    ]
)
RESIDUALS = torch.tensor(  # normalize(max(0, P3[i] - Q3[i])), by hand
    [
        [0.0, 0.0, 0.25, 0.75],
        [0.75, 0.25, 0.0, 0.0],
        [0.0, 1 / 3, 1 / 3, 1 / 3],
    ]
)


def g_pvalue(counts: list[int] | torch.Tensor, probs: torch.Tensor) -> float:
    """G-test p-value of observed counts against exact probabilities; impossible cells must stay empty."""
    counts = torch.as_tensor(counts, dtype=torch.float64)
    probs = probs.to(torch.float64)
    possible = probs > 0
    assert counts[~possible].sum() == 0, f"an impossible outcome occurred: {counts.tolist()}"
    observed, expected = counts[possible], probs[possible] / probs[possible].sum() * counts.sum()
    return float(power_divergence(observed.numpy(), expected.numpy(), lambda_="log-likelihood").pvalue)


def acceptance_length_probs(beta: list[float]) -> torch.Tensor:
    """P(accepted = j), j = 0..k, when position i is accepted independently with probability beta[i]."""
    out, alive = [], 1.0
    for b in beta:
        out.append(alive * (1 - b))
        alive *= b
    return torch.tensor(out + [alive])


def test_residuals_by_hand():
    torch.testing.assert_close(residual_distribution(P3[:3], Q3), RESIDUALS)


def test_fixed_draft_of_three_accepts_with_the_product_of_independent_chances():
    """Drafts [1, 2, 0]: min(1, p/q) = 2/3, 2/3, 5/14 at the three positions, each judged with its own
    uniform. Exact P(accepted = j) vs the counts over many draws (a shared uniform gives P(1) = 0)."""
    draft = torch.tensor([1, 2, 0])
    accept = [0.2 / 0.3, 0.2 / 0.3, 0.25 / 0.7]
    g = torch.Generator().manual_seed(11)
    n, counts = 6000, [0] * 4
    for _ in range(n):
        v = verify_sampling(draft, Q3, P3, g)
        counts[v.accepted] += 1
        assert v.accept_probs == pytest.approx(accept)
        assert len(set(v.uniforms)) == 3  # one uniform per position
    exact = acceptance_length_probs(accept)
    assert g_pvalue(counts, exact) > 1e-3, (counts, (exact * n).tolist())


def test_k3_acceptance_lengths_corrections_and_bonus_follow_the_exact_distributions():
    """Drafts drawn from Q3 row by row, many rounds. Exact laws:
    accepted = j with prod_{i<j} beta_i * (1 - beta_j), beta_i = sum_x min(p_i(x), q_i(x));
    the correction after j accepted drafts ~ position j's residual; the bonus ~ p_3; and the first
    committed token ~ p_0 (the output is the target's)."""
    beta = torch.minimum(P3[:3], Q3).sum(-1).tolist()  # [0.6, 0.6, 0.55]
    g, draw = torch.Generator().manual_seed(12), torch.Generator().manual_seed(13)
    n = 16000
    lengths = [0] * 4
    tokens = torch.zeros(4, 4)  # [accepted, token]
    first = torch.zeros(4)
    for _ in range(n):
        draft = torch.multinomial(Q3, 1, generator=draw).squeeze(-1)  # [3], row i from q_i
        v = verify_sampling(draft, Q3, P3, g)
        lengths[v.accepted] += 1
        tokens[v.accepted, v.token] += 1
        first[v.drafted[0] if v.accepted else v.token] += 1
    assert g_pvalue(lengths, acceptance_length_probs(beta)) > 1e-3, lengths
    for j in range(3):  # the correction at position j comes from position j's residual
        assert g_pvalue(tokens[j], RESIDUALS[j]) > 1e-3, (j, tokens[j].tolist())
    assert g_pvalue(tokens[3], P3[3]) > 1e-3, tokens[3].tolist()
    assert g_pvalue(first, P3[0]) > 1e-3, first.tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_row_argmax_is_torch_argmax_on_ties_nan_and_views(dtype):
    """The numpy path (CPU float32/64) and the torch path both give torch.argmax's index: the first
    maximum on ties, NaN counted as the maximum, for 1-D rows, blocks and strided views."""
    from specli.engine.sampling import row_argmax

    gen = torch.Generator().manual_seed(0)
    block = (torch.randn(6, 1000, generator=gen) * 3).round().to(dtype)  # many exact ties
    block[2, 17] = float("nan")
    block[4, :] = float("-inf")
    for x in (block, block[3], block[:, ::3], block.t()):
        assert torch.equal(row_argmax(x), x.argmax(-1)), x.shape
    assert row_argmax(block).dtype == torch.int64
