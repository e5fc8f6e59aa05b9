"""Sampling is lossless: the joint distribution of the first two generated tokens equals the target's.

The exact distribution is enumerated from the target with transformers' own warpers; the empirical one
comes from the speculative engine with a drafter that disagrees with the target. A G-test at fixed seeds
must pass, and must fail for a deliberately biased sampler (the control).
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import make_model
from scipy.stats import chi2
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specli.drafters.draft_model import DraftModelDrafter
from specli.engine.drafter import Proposal
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig, process_logits
from specli.engine.stopping import StopCriteria
from specli.models.cached_lm import CachedLM

V = 8
PROMPT = [1, 5, 2, 7, 3]
RUNS = 2500


@pytest.fixture(scope="module")
def models():
    return disagreeing_models()


def disagreeing_models():
    """A peaked random target and a drafter made from it with noisy weights (agrees about half the time)."""
    target = make_model("llama", V, layers=2, hidden=32, seed=21, init_range=0.6, eos_token_id=None)
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3 * p.std())
    return target, draft


def warpers(cfg: SamplingConfig) -> LogitsProcessorList:
    out = LogitsProcessorList([TemperatureLogitsWarper(cfg.temperature)])
    if cfg.top_k:
        out.append(TopKLogitsWarper(cfg.top_k))
    if cfg.top_p < 1:
        out.append(TopPLogitsWarper(cfg.top_p))
    return out


@torch.no_grad()
def exact_joint(target, cfg: SamplingConfig, prompt: list[int] = PROMPT) -> torch.Tensor:
    """P(t1, t2) [V, V] after prompt, by enumeration with transformers' warpers."""
    w = warpers(cfg)

    def dist(ids):
        logits = target(torch.tensor([ids])).logits[:, -1].float()
        return w(torch.tensor([ids]), logits).softmax(-1)[0]

    first = dist(prompt)
    return torch.stack([first[a] * dist(prompt + [a]) for a in range(V)])


def empirical_joint(target, drafter, cfg: SamplingConfig, k: int = 2) -> tuple[torch.Tensor, float]:
    """Counts [V, V] of the first two tokens over RUNS seeds, and the acceptance rate seen."""
    counts, drafted, accepted = torch.zeros(V, V), 0, 0
    lm = CachedLM(target)
    for seed in range(RUNS):
        config = EngineConfig(max_new_tokens=2, num_draft_tokens=k, sampling=cfg, seed=seed)
        rounds = list(generate_rounds(lm, drafter, PROMPT, config, StopCriteria(set())))
        tokens = [t for r in rounds for t in r.committed]
        counts[tokens[0], tokens[1]] += 1
        drafted += sum(len(r.drafted) for r in rounds)
        accepted += sum(r.accepted for r in rounds)
    return counts, accepted / drafted


def g_test_pvalue(observed: torch.Tensor, probs: torch.Tensor) -> float:
    """G-test of observed counts against probabilities; cells with expected < 5 are pooled."""
    observed, expected = observed.flatten(), probs.flatten() * observed.sum()
    small = expected < 5
    obs = torch.cat([observed[~small], observed[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    if exp[-1] == 0:
        assert obs[-1] == 0, "a token the target can never produce was produced"
        obs, exp = obs[:-1], exp[:-1]
    nz = obs > 0
    g = 2 * (obs[nz] * (obs[nz] / exp[nz]).log()).sum().item()
    return float(chi2.sf(g, df=len(obs) - 1))


class GreedyDraftReportingSoftmax(DraftModelDrafter):
    """The classic bug (docs/design.md §3.3): draft the argmax but report the softmax distribution as q."""

    def propose(self, k, sampling, generator):
        ids, qs = [], []
        inp = torch.tensor(self._pending)
        for _ in range(k):
            logits = self._align(self.lm.forward(inp, self._cache, last_only=True)[-1].float())
            tok = logits.argmax(-1, keepdim=True)
            ids.append(tok)
            qs.append(process_logits(logits, sampling))
            inp = tok
        self._drafted = torch.cat(ids)
        return Proposal(ids=self._drafted, q=torch.stack(qs))


CONFIGS = {
    "temperature 1": SamplingConfig(1.0),
    "top-k 3": SamplingConfig(1.0, top_k=3),
    "top-p 0.8 at temperature 0.9": SamplingConfig(0.9, top_p=0.8),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_first_two_tokens_follow_the_target_distribution(models, name):
    target, draft = models
    cfg = CONFIGS[name]
    exact = exact_joint(target, cfg)
    observed, acceptance = empirical_joint(target, DraftModelDrafter(CachedLM(draft), V), cfg)
    assert 0.2 < acceptance < 0.8  # the drafter disagrees often: both acceptances and corrections happen
    assert g_test_pvalue(observed, exact) > 1e-3


def test_control_biased_sampler_fails_the_same_test(models):
    target, draft = models
    cfg = CONFIGS["temperature 1"]
    exact = exact_joint(target, cfg)
    observed, _ = empirical_joint(target, GreedyDraftReportingSoftmax(CachedLM(draft), V), cfg)
    assert g_test_pvalue(observed, exact) < 1e-6


# --------------------------------------------------------------------------- a first round of k >= 2

RUNS_K2 = 1500


@torch.no_grad()
def exact_joint3(target, cfg: SamplingConfig, prompt: list[int] = PROMPT) -> torch.Tensor:
    """P(t1, t2, t3) [V, V, V] after prompt, by enumeration with transformers' warpers."""
    w = warpers(cfg)

    def dists(prefixes: list[list[int]]) -> torch.Tensor:  # [n, V]
        ids = torch.tensor(prefixes)
        return w(ids, target(ids).logits[:, -1].float()).softmax(-1)

    first = dists([prompt])[0]  # [V]
    second = dists([prompt + [a] for a in range(V)])  # [V, V]
    third = dists([prompt + [a, b] for a in range(V) for b in range(V)]).reshape(V, V, V)
    return first[:, None, None] * second[:, :, None] * third


def test_first_three_tokens_follow_the_target_when_the_first_round_drafts_two(models):
    """max_new_tokens=3 and k=3: the engine caps the first round at k=2, so a draft's second position is
    judged (its own uniform, its own residual) before anything else is committed."""
    target, draft = models
    cfg = SamplingConfig(1.0)
    exact = exact_joint3(target, cfg)
    lm, drafter = CachedLM(target), DraftModelDrafter(CachedLM(draft), V)
    counts = torch.zeros(V, V, V)
    first_round = torch.zeros(3)  # how many drafts the first round kept: 0, 1 or 2
    for seed in range(RUNS_K2):
        config = EngineConfig(max_new_tokens=3, num_draft_tokens=3, sampling=cfg, seed=seed)
        rounds = list(generate_rounds(lm, drafter, PROMPT, config, StopCriteria(set())))
        assert len(rounds[0].drafted) == 2
        first_round[rounds[0].accepted] += 1
        tokens = [t for r in rounds for t in r.committed]
        counts[tokens[0], tokens[1], tokens[2]] += 1
    assert first_round.min() > RUNS_K2 / 10, first_round  # rejections at both positions, and full accepts
    assert g_test_pvalue(counts, exact) > 1e-3
