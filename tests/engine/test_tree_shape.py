"""Shapes of drawn-children trees (issue 41): under sampling the cost model chooses a tree's shape before
drafting, from past rounds' acceptance by depth and draw rank (`DraftLength.choose_shape`), and the
drafter's draws fill that shape (`grow_shaped_tree`). Lossless because no draw decides which nodes stay:
the G-test through the loop is in test_tree_lossless.py."""

from __future__ import annotations

import pytest
import torch

from specli.engine.draft_length import (
    RANK_PRIOR,
    SHAPE_EXPLORE,
    WARMUP_ROUNDS,
    DraftLength,
    rank_outcomes,
)
from specli.engine.drafter import Drafter
from specli.engine.loop import EngineConfig, _tree_round
from specli.engine.sampling import SamplingConfig
from specli.engine.tree import ROOT, TreeGrowth, TreeRecord, children, depths, grow, grow_shaped_tree

V = 12
SHAPE = [-1, -1, -1, 0, 0, 2]  # the root draws 3; its 1st draw draws 2, its 3rd draws 1


def uniform_over(tokens: int) -> torch.Tensor:
    row = torch.zeros(V)
    row[:tokens] = 1.0 / tokens
    return row


def recording_expand(support: int, calls: list[list[int]]):
    def expand(frontier: list[int], growth: TreeGrowth) -> torch.Tensor:
        calls.append(list(frontier))
        return torch.stack([uniform_over(support) for _ in frontier])  # [w, V]

    return expand


def test_the_draws_fill_the_shape_depth_by_depth():
    calls: list[list[int]] = []
    gen = torch.Generator().manual_seed(0)
    tokens, parents, probs, q = grow_shaped_tree(uniform_over(6), recording_expand(6, calls), SHAPE, gen)
    assert parents == SHAPE
    assert calls == [[0, 2]]  # one expand for depth 2, over the nodes the shape gives children
    for row in children(parents):
        assert len({tokens[i] for i in row}) == len(row)  # siblings distinct
    assert probs == pytest.approx([1 / 6] * 6)
    assert q.shape == (7, V)
    assert [bool(q[r].sum() > 0) for r in range(7)] == [True, True, False, True, False, False, False]


def test_a_draw_past_the_support_leaves_its_shape_node_and_its_subtree_out():
    """q has 2 tokens: the root's 3rd draw is not there, nor the child the shape hung under it."""
    gen = torch.Generator().manual_seed(1)
    tokens, parents, _, q = grow_shaped_tree(uniform_over(2), recording_expand(2, []), SHAPE, gen)
    assert parents == [-1, -1, 0, 0]
    assert sorted(tokens[:2]) == [0, 1] and q.shape == (5, V)


def test_grow_cuts_a_shape_deeper_than_the_drafter_drafts():
    gen = torch.Generator().manual_seed(2)
    _, parents, _, _ = grow(uniform_over(6), recording_expand(6, []), 1, 3, 16, gen, drawn=True, shape=SHAPE)
    assert parents == [-1, -1, -1]
    tokens, parents, _, q = grow(uniform_over(6), recording_expand(6, []), 2, 3, 16, None, drawn=False)
    assert q is None and parents[:3] == [-1, -1, -1]  # greedy growth ignores shapes (none is given)


def record(parents, status, path) -> TreeRecord:
    n = len(parents)
    return TreeRecord(list(range(n)), parents, [0.5] * n, [0.5] * n, status, path, [0.5] * n, [0.5] * n)


def test_rank_outcomes_are_the_tries_along_the_accepted_path():
    """The root's 1st draw refused, its 2nd accepted; under that one both draws refused (a correction)."""
    tree = record([-1, -1, 1, 1, 0], ["rejected", "accepted", "rejected", "rejected", "unjudged"], [1])
    assert rank_outcomes(tree) == [(1, 1, False), (1, 2, True), (2, 1, False), (2, 2, False)]
    stopped = record([-1, -1, 0], ["accepted", "unjudged", "accepted"], [0, 2])
    assert rank_outcomes(stopped) == [(1, 1, True), (2, 1, True)]  # a leaf on the path: no more tries


def timed(max_k: int, slope: float) -> DraftLength:
    """A controller whose costs are measured: 1 ms a drafted depth, verify 2 ms + slope a token."""
    length = DraftLength(max_k)
    for k in (1, 2, 3, 4):
        length.observe(k, 0, 1e-3 * k, 2e-3 + slope * (k + 1))
    return length


def feed_trees(length: DraftLength, first: bool, second: bool, rounds: int, slope: float = 0.0) -> None:
    """Trees of two draws at the root: the first accepted or not, the second (when tried) likewise;
    timed as `timed` times rounds."""
    for _ in range(rounds):
        if first:
            tree = record([-1, -1], ["accepted", "unjudged"], [0])
        else:
            tree = record([-1, -1], ["rejected", "accepted" if second else "rejected"], [1] if second else [])
        length.observe(1, len(tree.path), 1e-3, 2e-3 + 3 * slope, verified=3, tree=tree)


def branching() -> DraftLength:
    """The controller of the flat-verify test above, whose shapes branch."""
    length = timed(4, 0.0)
    for _ in range(20):
        feed_trees(length, first=True, second=False, rounds=1)
        feed_trees(length, first=False, second=True, rounds=1)
    return length


def test_rank_acceptance_starts_at_its_prior_and_learns_from_drawn_trees():
    length = DraftLength(4)
    assert length.rank_acceptance(1, 2) == pytest.approx(RANK_PRIOR)
    feed_trees(length, first=False, second=True, rounds=40)
    assert length.rank_acceptance(1, 2) > 0.9
    assert length.rank_acceptance(1, 1) < 0.15  # the first draws: the chain's position-1 estimate
    assert length.rank_acceptance(3, 2) > 0.6  # other depths lean on the rank's pooled share


def test_no_shape_before_costs_are_measured_or_under_width_one():
    length = DraftLength(4)
    assert length.choose_shape(4, 100, width=3, size=16) is None
    assert timed(4, 0.0).choose_shape(4, 100, width=1, size=16) is None


def test_a_flat_verify_and_second_draws_that_land_branch_the_tree():
    """The first draws land half the time and the second half of the rest: with verification free of
    its length the tree branches at the root and below; it stays within size, width and depth (deeper
    nodes cost a draft step each, so it need not fill `size`)."""
    length = branching()
    shape = length.choose_shape(4, 100, width=2, size=10)
    assert shape is not None and 4 <= len(shape) <= 10 and max(depths(shape)) <= 4
    kids = children(shape)
    assert kids[0] == [0, 1] and all(len(row) <= 2 for row in kids)
    by_depth: dict[int, int] = {}
    for node, d in enumerate(depths(shape)):
        by_depth[d] = by_depth.get(d, 0) + bool(kids[node + 1])
    assert max(by_depth.values()) <= 2  # at most `width` nodes expanded a depth
    assert len(length.choose_shape(4, 3, width=2, size=10) or []) <= 6  # budget 3: depth <= 2
    assert max(depths(length.choose_shape(4, 3, width=2, size=10) or [ROOT + 1])) <= 2


def test_a_costly_verify_or_refused_second_draws_keep_the_chain():
    """Second draws that never land are not worth a verified token (here 2 % of a verify), nor, within
    the margin a tree must promise, a free one; and no extra node is when each verified token costs
    more than a round's fixed part. The chain compared with is the round's k (`choose`)."""
    for slope in (1e-4, 0.0):
        length = timed(4, slope)
        feed_trees(length, first=False, second=False, rounds=40, slope=slope)
        assert length.choose_shape(length.choose(100)[0], 100, width=2, size=10) is None
    steep = timed(4, 5e-3)
    steep.drawn.rounds = WARMUP_ROUNDS  # past the warm-up trees (next test)
    assert steep.choose_shape(steep.choose(100)[0], 100, width=2, size=10) is None


def test_the_first_drawn_trees_take_every_node_they_may():
    """WARMUP_ROUNDS trees of `size` nodes come first, whatever the estimates, so that what trees
    deliver and cost here is measured; then the cost model decides."""
    length = timed(4, 5e-3)
    shapes = []
    for _ in range(WARMUP_ROUNDS + 1):
        shapes.append(length.choose_shape(length.choose(100)[0], 100, width=2, size=6))
        if shapes[-1] is not None:
            tree = record(shapes[-1], ["rejected"] * len(shapes[-1]), [])
            length.observe(max(depths(shapes[-1])), 0, 2e-3, 2e-3 + 5e-3 * 7, verified=7, tree=tree)
    assert [len(shape or []) for shape in shapes] == [6] * WARMUP_ROUNDS + [0]
    assert length.drawn.rounds == WARMUP_ROUNDS


def test_what_drawn_trees_cost_beyond_chains_is_learned_and_retried_now_and_then():
    """Tree rounds that take 10 ms more than a chain of their depth price every node at about 3 ms
    (3 nodes): no shape pays then. After SHAPE_EXPLORE rounds without one, a tree is tried again."""
    length = branching()
    big = record([-1, -1, 0], ["accepted", "unjudged", "rejected"], [0])
    for _ in range(5):
        length.observe(2, 1, 2e-3, 2e-3 + 10e-3, verified=4, tree=big)
    k = length.choose(100)[0]
    chosen = [length.choose_shape(k, 100, width=2, size=10) for _ in range(SHAPE_EXPLORE + 1)]
    assert chosen[:-1] == [None] * SHAPE_EXPLORE and chosen[-1] is not None
    assert length.choose_shape(k, 100, width=2, size=10) is None  # and priced again after it


def test_a_seeded_generation_shares_what_trees_are_worth():
    """A seeded sampled generation starts k from the priors but learns trees with the pair's own."""
    kept = branching()
    fresh = DraftLength(4)
    fresh.share_trees(kept)
    assert fresh.rank_acceptance(1, 2) == kept.rank_acceptance(1, 2) > 0.5
    feed_trees(fresh, first=False, second=False, rounds=30)
    assert kept.rank_acceptance(1, 2) < 0.5  # taught through the fresh one
    assert fresh.accept_probs() != kept.accept_probs()  # positions are its own


class _Drawing(Drafter):
    name = "drawing"
    tree_size, tree_width, tree_draws = 8, 2, True

    def reset(self, prompt_ids):  # pragma: no cover - not called
        pass

    def propose(self, k, sampling, generator, nodes=0, shape=None):  # pragma: no cover
        raise AssertionError

    def commit(self, accepted, token):  # pragma: no cover
        pass


@pytest.mark.parametrize(
    ("greedy", "fixed", "expected"),
    [(False, False, "shape"), (True, False, "use_tree"), (False, True, "use_tree")],
)
def test_a_round_asks_for_a_shape_only_for_drawn_children_under_the_cost_model(greedy, fixed, expected):
    length = timed(4, 0.0)
    length.fixed = fixed
    asked: list[str] = []
    length.choose_shape = lambda *a, **k: asked.append("shape") or [-1, -1]  # type: ignore[method-assign]
    length.use_tree = lambda: asked.append("use_tree") or True  # type: ignore[method-assign]
    sampling = SamplingConfig(temperature=0.0 if greedy else 1.0)
    config = EngineConfig(max_new_tokens=8, num_draft_tokens=4, sampling=sampling)
    tree, shape = _tree_round(_Drawing(), length, 4, 8, None, config)
    assert asked == [expected] and tree
    assert (shape == [-1, -1]) == (expected == "shape")
    assert _tree_round(_Drawing(), length, 0, 8, None, config) == (False, None)  # a plain round
