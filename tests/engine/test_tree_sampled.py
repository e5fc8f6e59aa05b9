"""The multi-candidate rule for children drawn from q (issue 41), on its own: drawing without replacement
(`sample_distinct`) follows the sequential law the rule divides by, and one row of a drawn tree emits a
token distributed as the target's p for widths 1-4, with a biased rule as control. No models: p and q are
fixed distributions, so thousands of rounds run in seconds."""

from __future__ import annotations

import pytest
import torch
from test_lossless_sampling import g_test_pvalue

import specli.engine.verify as verify_module
from specli.engine.sampling import sample_distinct
from specli.engine.tree import ROOT, grow_sampled_tree
from specli.engine.verify import verify_tree_sampled

V = 6
P = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.07, 0.03])  # the target's distribution at the row
Q = torch.tensor([0.05, 0.10, 0.40, 0.05, 0.30, 0.10])  # the drafter's: far from P on purpose
RUNS = 12000


def test_distinct_draws_follow_the_sequential_law():
    """P(first a, second b) = q(a) q(b) / (1 - q(a)); a token of probability 0 is never drawn and marks
    the draws past the support. Catches draws with replacement or a Gumbel key on the wrong scale."""
    generator = torch.Generator().manual_seed(0)
    ids, drawn = sample_distinct(Q.expand(RUNS, V), 2, generator)  # [RUNS, 2]
    assert bool(drawn.all()) and bool((ids[:, 0] != ids[:, 1]).all())
    observed = torch.zeros(V, V)
    observed.index_put_((ids[:, 0], ids[:, 1]), torch.ones(RUNS), accumulate=True)
    exact = Q[:, None] * Q[None, :] / (1 - Q[:, None])
    exact.fill_diagonal_(0)
    assert g_test_pvalue(observed, exact) > 1e-3
    sparse = torch.tensor([0.0, 0.7, 0.0, 0.3, 0.0, 0.0])
    ids, drawn = sample_distinct(sparse, 4, generator)
    assert sorted(ids[drawn].tolist()) == [1, 3] and drawn.tolist() == [True, True, False, False]


def one_row(width: int, runs: int, seed: int = 0) -> torch.Tensor:
    """Counts of the token a tree of the root's `width` drawn children commits first (the accepted
    child, or the correction when every child is refused)."""
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(V)
    p = torch.stack([P] + [torch.full((V,), 1.0 / V)] * width)  # [N+1, V]; the children's rows: any
    for _ in range(runs):

        def never(frontier, growth):  # depth 1: no node is expanded
            raise AssertionError("depth 1 expands nothing")

        tokens, parents, probs, q = grow_sampled_tree(Q, never, 1, width, width, generator)
        assert parents == [ROOT] * len(tokens) and probs == [float(Q[t]) for t in tokens]
        verdict = verify_module.verify_tree_sampled(torch.tensor(tokens), parents, p, q, generator)
        counts[verdict.committed[0]] += 1
    return counts


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_one_row_of_drawn_children_emits_the_targets_distribution(width):
    """The rule's core: whatever the width, the first committed token is distributed as p."""
    assert g_test_pvalue(one_row(width, RUNS), P) > 1e-3


def unrenormalised(tokens, parents, p, q, generator, draft_probs=None):
    """The control: the rule with residuals, but every child divided by the row's original q (and the
    residuals taken against it) instead of q', the distribution a later child was really drawn from."""
    toks, n = tokens.tolist(), tokens.shape[0]
    p_row, kept = p[0].clone(), None
    for child, c in enumerate(toks):
        if float(torch.rand((), generator=generator)) < min(1.0, float(p_row[c] / q[0, c])):
            kept = child
            break
        p_row = verify_module.residual_distribution(p_row, q[0])
    token = toks[kept] if kept is not None else int(torch.multinomial(p_row, 1, generator=generator))
    path = [kept] if kept is not None else []
    return verify_module._tree_verdict(
        toks, parents, path, token, ["unjudged"] * n, [0.0] * n, [1.0] * n, [], []
    )


def test_control_dividing_by_the_original_q_fails_the_same_test(monkeypatch):
    """The test above must fail when later children are divided by q instead of q'."""
    assert verify_module.verify_tree_sampled is verify_tree_sampled
    monkeypatch.setattr(verify_module, "verify_tree_sampled", unrenormalised)
    assert g_test_pvalue(one_row(3, RUNS), P) < 1e-6


def test_the_record_keeps_each_try():
    """Each tried node's p' and q' at its try, and min(1, p'/q') as its acceptance probability; the
    first child's are the row's own p and q. Catches a record of the wrong stage (explain shows it)."""
    generator = torch.Generator().manual_seed(3)
    tokens, parents, probs, q = grow_sampled_tree(Q, None, 1, 3, 3, generator)  # type: ignore[arg-type]
    p = torch.stack([P] + [P] * 3)
    verdict = verify_tree_sampled(torch.tensor(tokens), parents, p, q, generator, probs)
    tree = verdict.tree
    assert tree is not None and tree.sampled
    first = tokens[0]
    assert tree.tried_p[0] == pytest.approx(float(P[first])) and tree.tried_q[0] == pytest.approx(
        float(Q[first])
    )
    rest = Q.clone()
    rest[first] = 0
    assert tree.tried_q[1] == pytest.approx(float(Q[tokens[1]] / rest.sum()), rel=1e-5)
    for i in range(3):
        assert verdict.accept_probs[verdict.drafted.index(tokens[i])] == pytest.approx(
            min(1.0, tree.tried_p[i] / tree.tried_q[i]), rel=1e-5
        )
