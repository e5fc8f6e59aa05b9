"""What a model drafter promises the engine (docs/design.md §3), checked against transformers directly:

- `Proposal.q[i]` is the distribution draft i was drawn from: transformers' warpers (temperature, top-k,
  top-p, in that order) and softmax on the drafting model's own logits for prompt + d_1..d_(i-1), at
  temperatures far from 1 (a q reported at temperature 1 while sampling at T must not pass);
- after every round the draft model's cache holds exactly the committed context: in a greedy run each
  round's drafts are the draft model's own greedy `generate()` on what was committed so far.
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import make_model
from scipy.stats import power_divergence
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specli.drafters.draft_model import DraftModelDrafter
from specli.drafters.self_speculative import SelfSpeculativeDrafter
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig
from specli.engine.stopping import StopCriteria
from specli.models.cached_lm import CachedLM
from specli.models.layer_stack import LayerStack

V = 24
PROMPT = [3, 17, 5, 9, 1, 12]
K = 4
EXIT_LAYER = 2
CONFIGS = {
    "T 0.3": SamplingConfig(0.3),
    "T 2.5": SamplingConfig(2.5),
    "T 2.5 top-k 6": SamplingConfig(2.5, top_k=6),
    "T 2.5 top-p 0.7": SamplingConfig(2.5, top_p=0.7),
    "T 0.3 top-k 8 top-p 0.9": SamplingConfig(0.3, top_k=8, top_p=0.9),
}


def warped(logits: torch.Tensor, ids: list[int], cfg: SamplingConfig) -> torch.Tensor:
    """transformers' own processing of next-token logits [V] -> probabilities [V]."""
    warpers = LogitsProcessorList([TemperatureLogitsWarper(cfg.temperature)])
    if cfg.top_k:
        warpers.append(TopKLogitsWarper(cfg.top_k))
    if cfg.top_p < 1:
        warpers.append(TopPLogitsWarper(cfg.top_p))
    return warpers(torch.tensor([ids]), logits.float()[None]).softmax(-1)[0]


@torch.no_grad()
def next_logits(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0, -1]  # [V]


@pytest.fixture(scope="module")
def draft_model():
    return make_model("llama", V, layers=2, hidden=32, seed=31, init_range=0.5, eos_token_id=None)


@pytest.fixture(scope="module")
def early_exit():
    """(full model, the same model cut after EXIT_LAYER layers): the self drafter's own logits are the
    cut model's (its layers, then the final norm and LM head)."""
    full = make_model("llama", V, layers=4, hidden=32, seed=32, init_range=0.5, eos_token_id=None)
    cut = copy.deepcopy(full)
    cut.model.layers = cut.model.layers[:EXIT_LAYER]
    cut.config.num_hidden_layers = EXIT_LAYER
    if getattr(cut.config, "layer_types", None):
        cut.config.layer_types = cut.config.layer_types[:EXIT_LAYER]
    return full, cut


def assert_q_is_the_warped_distribution(proposal, model, cfg):
    ids = proposal.ids.tolist()
    assert len(ids) == K and proposal.q is not None and proposal.q.shape == (K, V)
    for i in range(K):
        context = PROMPT + ids[:i]
        expected = warped(next_logits(model, context), context, cfg)
        torch.testing.assert_close(proposal.q[i].float(), expected, atol=1e-5, rtol=1e-4)
        assert proposal.q[i][ids[i]] > 0  # the drawn token is possible under q


@pytest.mark.parametrize("name", list(CONFIGS))
def test_draft_model_q_is_transformers_warpers_on_its_own_logits(draft_model, name):
    cfg = CONFIGS[name]
    drafter = DraftModelDrafter(CachedLM(draft_model), V)
    for seed in range(3):
        drafter.reset(PROMPT)
        proposal = drafter.propose(K, cfg, torch.Generator().manual_seed(seed))
        assert_q_is_the_warped_distribution(proposal, draft_model, cfg)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_self_drafter_q_is_transformers_warpers_on_the_early_exit_logits(early_exit, name):
    cfg = CONFIGS[name]
    full, cut = early_exit
    target = CachedLM(full)
    drafter = SelfSpeculativeDrafter(LayerStack(full), EXIT_LAYER)
    for seed in range(3):
        cache = target.new_cache()  # as the engine does: prefill all but the last prompt token, attach
        target.forward(torch.tensor(PROMPT[:-1]), cache, last_only=True)
        target.settle(cache)
        drafter.reset(PROMPT)
        drafter.attach(cache)
        proposal = drafter.propose(K, cfg, torch.Generator().manual_seed(seed))
        assert_q_is_the_warped_distribution(proposal, cut, cfg)


def test_draft_model_first_draft_is_drawn_from_its_q(draft_model):
    """And the token really is drawn from that q (a greedy or differently-tempered draw fails)."""
    cfg = SamplingConfig(2.5, top_k=6)
    drafter = DraftModelDrafter(CachedLM(draft_model), V)
    g = torch.Generator().manual_seed(0)
    counts, q = torch.zeros(V), None
    for _ in range(1000):
        drafter.reset(PROMPT)
        proposal = drafter.propose(1, cfg, g)
        counts[proposal.ids[0]] += 1
        q = proposal.q[0]
    expected = warped(next_logits(draft_model, PROMPT), PROMPT, cfg).double()
    torch.testing.assert_close(q.double(), expected, atol=1e-5, rtol=1e-4)
    keep = expected > 0
    assert counts[~keep].sum() == 0
    pvalue = power_divergence(
        counts[keep].double().numpy(), (expected[keep] * counts.sum()).numpy(), lambda_="log-likelihood"
    ).pvalue
    assert pvalue > 1e-3, (counts / counts.sum()).tolist()


# --------------------------------------------------------------------------- the draft cache


@pytest.fixture(scope="module")
def disagreeing_pair():
    """A target and a drafter made from it with noisy weights: they agree on some tokens, not all."""
    target = make_model("llama", V, layers=2, hidden=32, seed=41, init_range=0.5, eos_token_id=None)
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(42)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1 * p.std())
    return target, draft


@pytest.mark.parametrize("k", [2, 4])
def test_each_round_drafts_the_draft_models_greedy_continuation_of_the_committed_context(disagreeing_pair, k):
    """Rewinding the draft cache wrongly (keeping a rejected draft, dropping a kept one) changes the
    context the next drafts see; the output stays right, so only the drafts show it."""
    target, draft = disagreeing_pair
    config = EngineConfig(max_new_tokens=60, num_draft_tokens=k, sampling=SamplingConfig(0.0))
    drafter = DraftModelDrafter(CachedLM(draft), V)
    context = list(PROMPT)
    accepted = []
    for r in generate_rounds(CachedLM(target), drafter, PROMPT, config, StopCriteria(set())):
        n = len(r.drafted)
        if n:
            with torch.no_grad():
                out = draft.generate(
                    torch.tensor([context]), attention_mask=torch.ones(1, len(context), dtype=torch.long),
                    max_new_tokens=n, min_new_tokens=n, do_sample=False,
                )  # fmt: skip
            assert r.drafted == out[0, len(context) :].tolist(), (r.index, context)
            accepted.append((r.accepted, n))
        context += r.committed
    # every way a round can end happened: a rejection before the last draft, at it, and a full accept
    assert any(a < n - 1 for a, n in accepted)
    assert any(a == n - 1 for a, n in accepted)
    assert any(a == n for a, n in accepted)
