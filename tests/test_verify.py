"""Verification on hand-made distributions (GUIDE §3)."""

from __future__ import annotations

import pytest
import torch

from specli.verify import acceptance_probabilities, residual_distribution, verify_greedy, verify_sampling

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
