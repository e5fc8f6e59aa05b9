"""Sampling through token trees is lossless (issues 32, 41): the joint distribution of the first tokens
equals the target's when a drafter proposes trees of width 2 and 3, with children drawn from its q (the
multi-candidate rule, what drafters do under sampling) and with children chosen as its top tokens (the
renormalising rule, lookup's), by a G-test against the distribution enumerated with transformers'
warpers; the same test catches a biased rule of each kind (the controls)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from test_lossless_sampling import (
    CONFIGS,
    PROMPT,
    V,
    disagreeing_models,
    exact_joint,
    exact_joint3,
    g_test_pvalue,
)

import specli.drafters.draft_model as draft_module
import specli.engine.tree as tree_module
import specli.engine.verify as verify_module
from specli.drafters.draft_model import DraftModelDrafter
from specli.engine.draft_length import DraftLength
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig, sample
from specli.engine.stopping import StopCriteria
from specli.engine.tree import children, depths, grow, subtree
from specli.engine.verify import (
    Verdict,
    _tree_verdict,
    acceptance_probabilities,
    verify_tree_sampled,
    verify_tree_sampling,
)
from specli.models.cached_lm import CachedLM

RUNS = 2500
RUNS_DEEP = 1500


@pytest.fixture(scope="module")
def models():
    return disagreeing_models()


@pytest.fixture(params=["drawn", "top"])
def kind(request, monkeypatch):
    """Which children the draft model's trees get under sampling: drawn from q (its own behaviour) or
    its top tokens (the deterministic form, which lookup's trees take), forced through `grow`."""
    if request.param == "top":

        def top_children(*args, **kwargs):
            return grow(*args, **{**kwargs, "drawn": False})

        monkeypatch.setattr(draft_module, "grow", top_children)
    return request.param


def tree_counts(target, draft, cfg: SamplingConfig, width: int, size: int, tokens: int, runs: int):
    """Counts of the first `tokens` generated tokens over `runs` seeds with trees of `size` nodes and
    `width` (fixed: every round verifies the whole tree), and which child the first round kept at the
    root (index among the root's children; -1: none)."""
    lm = CachedLM(target)
    drafter = DraftModelDrafter(CachedLM(draft), V, tree_size=size, tree_width=width)
    counts = torch.zeros((V,) * tokens)
    kept = torch.zeros(width + 1)
    for seed in range(runs):
        config = EngineConfig(
            max_new_tokens=tokens, num_draft_tokens=tokens, fixed_k=True, sampling=cfg, seed=seed
        )
        rounds = list(generate_rounds(lm, drafter, PROMPT, config, StopCriteria(set())))
        first = rounds[0].tree
        assert first is not None and first.size > 1
        if verify_module.verify_tree_sampled is verify_tree_sampled:  # not a control: which rule judged it
            assert first.sampled == (grow is draft_module.grow)
        root_children = [i for i, parent in enumerate(first.parents) if parent == -1]
        kept[root_children.index(first.path[0]) if first.path else -1] += 1
        out = [t for r in rounds for t in r.committed]
        counts[tuple(out[:tokens])] += 1
    return counts, kept


@pytest.mark.parametrize("width", [2, 3])
def test_first_two_tokens_follow_the_target_through_trees(models, width, kind):
    """max_new_tokens 2: the first round's tree is the root's `width` children (depth 1), so the
    multi-child rule decides the first token, and its row's distribution the second."""
    target, draft = models
    cfg = CONFIGS["temperature 1"]
    observed, kept = tree_counts(target, draft, cfg, width, size=width, tokens=2, runs=RUNS)
    assert kept[1] > RUNS / 50 and kept[-1] > RUNS / 50, kept  # second children kept; all refused too
    assert g_test_pvalue(observed, exact_joint(target, cfg)) > 1e-3


@pytest.mark.parametrize("width", [2, 3])
def test_first_three_tokens_follow_the_target_through_deeper_trees(models, width, kind):
    """max_new_tokens 3: the first round's tree has depth 2 (width x width grandchildren, 6 nodes kept),
    so an accepted second child's own children are judged at its row."""
    target, draft = models
    cfg = CONFIGS["top-k 3"]
    observed, kept = tree_counts(target, draft, cfg, width, size=6, tokens=3, runs=RUNS_DEEP)
    assert kept[1] > RUNS_DEEP / 50, kept
    assert g_test_pvalue(observed, exact_joint3(target, cfg)) > 1e-3


def biased_tree_sampling(
    tokens: torch.Tensor,
    parents: Sequence[int],
    p: torch.Tensor,
    generator: torch.Generator | None,
    draft_probs: Sequence[float] | None = None,
) -> Verdict:
    """The control: children accepted with p(c) WITHOUT renormalising after a refusal (the second child
    is then kept with (1 - p(c_1)) p(c_2) instead of p(c_2)); corrections as the real rule."""
    n = tokens.shape[0]
    toks = tokens.tolist()
    kids = children(parents)
    status, path, row = ["unjudged"] * n, [], 0
    while True:
        matched = None
        for child in kids[row]:
            u = float(torch.rand((), generator=generator))
            if u < float(p[row, toks[child]]):
                matched = child
                status[child] = "accepted"
                break
            status[child] = "rejected"
        if matched is None:
            rest = p[row].clone()
            rest[[toks[c] for c in kids[row]]] = 0
            token = (
                int(sample(rest / rest.sum(), generator))
                if rest.sum() > 0
                else int(sample(p[row], generator))
            )
            break
        path.append(matched)
        row = matched + 1
    return _tree_verdict(toks, parents, path, token, status, [0.0] * n, draft_probs or [1.0] * n, [], [])


def test_control_a_tree_rule_without_renormalising_fails_the_same_test(models, monkeypatch):
    target, draft = models
    monkeypatch.setattr(draft_module, "grow", lambda *a, **k: grow(*a, **{**k, "drawn": False}))
    cfg = CONFIGS["temperature 1"]
    assert verify_module.verify_tree_sampling is verify_tree_sampling
    monkeypatch.setattr(verify_module, "verify_tree_sampling", biased_tree_sampling)
    observed, _ = tree_counts(target, draft, cfg, width=3, size=3, tokens=2, runs=RUNS)
    assert g_test_pvalue(observed, exact_joint(target, cfg)) < 1e-6


def sampled_without_residuals(
    tokens: torch.Tensor,
    parents: Sequence[int],
    p: torch.Tensor,
    q: torch.Tensor,
    generator: torch.Generator | None,
    draft_probs: Sequence[float] | None = None,
) -> Verdict:
    """The control: drawn children each accepted with min(1, p/q) against the row's ORIGINAL p and q
    (no residual after a refusal, no renormalised q'), the correction from the residual of p and q;
    the naive multi-draft rule, which over-emits tokens two draws propose."""
    n = tokens.shape[0]
    toks = tokens.tolist()
    kids = children(parents)
    status, path, row = ["unjudged"] * n, [], 0
    while True:
        matched = None
        for child in kids[row]:
            c = toks[child]
            ratio = float(acceptance_probabilities(p[row, c : c + 1], q[row, c : c + 1].to(p)))
            if float(torch.rand((), generator=generator)) < ratio:
                matched = child
                status[child] = "accepted"
                break
            status[child] = "rejected"
        if matched is None:
            token = int(sample(verify_module.residual_distribution(p[row], q[row].to(p)), generator))
            break
        path.append(matched)
        row = matched + 1
    return _tree_verdict(toks, parents, path, token, status, [0.0] * n, draft_probs or [1.0] * n, [], [])


def test_control_drawn_children_without_residuals_fail_the_same_test(models, monkeypatch):
    """Catches a multi-candidate rule that forgets the residual: the test above must fail for it."""
    target, draft = models
    cfg = CONFIGS["temperature 1"]
    assert verify_module.verify_tree_sampled is verify_tree_sampled
    monkeypatch.setattr(verify_module, "verify_tree_sampled", sampled_without_residuals)
    observed, _ = tree_counts(target, draft, cfg, width=3, size=3, tokens=2, runs=RUNS)
    assert g_test_pvalue(observed, exact_joint(target, cfg)) < 1e-6


ASYMMETRIC = [-1, -1, -1, 0, 1, 1]  # the root draws 3, its 1st draw 1 more, its 2nd draw 2


def shaped_counts(
    target, draft, cfg: SamplingConfig, runs: int, monkeypatch, exact_shape: bool = True
) -> torch.Tensor:
    """Counts of the first 3 tokens over `runs` seeds when the cost model (not fixed: the loop's own
    path) chooses the asymmetric shape above for every drawn tree, cut to the round's budget."""

    def always(self, k, budget, width, size, state=None):
        keep = [node for node, d in enumerate(depths(ASYMMETRIC)) if d <= budget - 1]
        return subtree(ASYMMETRIC, keep) if keep else None

    monkeypatch.setattr(DraftLength, "choose_shape", always)
    lm = CachedLM(target)
    drafter = DraftModelDrafter(CachedLM(draft), V, tree_size=len(ASYMMETRIC), tree_width=3)
    counts = torch.zeros((V,) * 3)
    for seed in range(runs):
        config = EngineConfig(max_new_tokens=3, num_draft_tokens=3, sampling=cfg, seed=seed)
        rounds = list(generate_rounds(lm, drafter, PROMPT, config, StopCriteria(set())))
        assert rounds[0].tree is not None and (rounds[0].tree.parents == ASYMMETRIC or not exact_shape)
        out = [t for r in rounds for t in r.committed]
        counts[tuple(out[:3])] += 1
    return counts


def test_first_three_tokens_follow_the_target_through_trees_of_a_chosen_shape(models, monkeypatch):
    """A shape the cost model chose before drafting (`choose_shape`), filled by the draws: lossless."""
    target, draft = models
    cfg = CONFIGS["top-k 3"]
    observed = shaped_counts(target, draft, cfg, RUNS_DEEP, monkeypatch)
    assert g_test_pvalue(observed, exact_joint3(target, cfg)) > 1e-3


def test_control_a_shape_pruned_by_its_draws_fails_the_same_test(models, monkeypatch):
    """Catches what choosing the shape before drafting avoids: dropping drawn nodes by their own draft
    probability (here every draw below 0.3, with what hangs below it) biases the output."""
    real = tree_module.grow_shaped_tree

    def pruned(first, expand, shape, generator):
        tokens, parents, probs, q = real(first, expand, shape, generator)
        keep: list[int] = []
        for node, parent in enumerate(parents):
            if probs[node] >= 0.3 and (parent == -1 or parent in keep):
                keep.append(node)
        rows = [0] + [node + 1 for node in keep]
        return [tokens[i] for i in keep], subtree(parents, keep), [probs[i] for i in keep], q[rows]

    monkeypatch.setattr(tree_module, "grow_shaped_tree", pruned)
    target, draft = models
    cfg = CONFIGS["top-k 3"]
    observed = shaped_counts(target, draft, cfg, RUNS_DEEP, monkeypatch, exact_shape=False)
    assert g_test_pvalue(observed, exact_joint3(target, cfg)) < 1e-6
