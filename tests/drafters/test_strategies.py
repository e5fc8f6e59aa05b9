"""Prompt lookup and self-speculation: greedy identity with transformers' generate(), the sampling
distribution, the self strategy's layer reuse (by counting decoder-layer calls), and errors. Lookup's
suffix index and drafter: test_suffix_lookup.py."""

from __future__ import annotations

import pytest
import torch
from conftest import OLD_SLIDING_CACHE, make_model
from test_lossless_sampling import V, exact_joint, g_test_pvalue

from specli.drafters.prompt_lookup import PromptLookupDrafter
from specli.drafters.self_speculative import SelfSpeculativeDrafter
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig
from specli.engine.stopping import StopCriteria
from specli.errors import SpecliError, UsageError
from specli.models.cached_lm import CachedLM
from specli.models.layer_stack import LayerStack
from specli.pair import Pair

# --------------------------------------------------------------------------- greedy identity

ARCHS = ["llama", "mistral", "qwen2", "qwen3", "phi3"]
PROMPT = [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6]


def reference(model, prompt, n, eos):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)[0, len(prompt) :].tolist()
    cut = next((i + 1 for i, t in enumerate(out) if t in eos), len(out))
    return out[:cut]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("strategy", ["lookup", "self"])
def test_greedy_output_is_the_targets_own(arch, strategy, tokenizer):
    model = make_model(arch, layers=4, hidden=64, seed=3)
    pair = Pair(model, tokenizer, strategy=strategy)
    expected = reference(model, PROMPT, 40, pair.eos_ids)
    for k in (1, 3, 6):
        for exit_layer in (1, 3) if strategy == "self" else (None,):
            result = pair.generate(
                prompt_ids=PROMPT, max_new_tokens=40, num_draft_tokens=k, exit_layer=exit_layer
            )
            assert result.token_ids == expected, (k, exit_layer)


def test_self_with_sliding_window_layers_is_exact(tokenizer):
    """Mixed full/sliding layers (qwen2 layer_types): the late-layer masks are sized per layer type."""
    model = make_model(
        "qwen2", layers=4, hidden=64, seed=4, use_sliding_window=True, sliding_window=6, max_window_layers=2
    )
    assert "sliding_attention" in model.config.layer_types
    pair = Pair(model, tokenizer, strategy="self")
    if OLD_SLIDING_CACHE:  # transformers < 5.18: refused with a clear error instead of a shape crash
        with pytest.raises(SpecliError, match="transformers 5.18"):
            pair.generate(prompt_ids=PROMPT, max_new_tokens=30, exit_layer=1)
        return
    expected = reference(model, PROMPT, 30, pair.eos_ids)
    for exit_layer in (1, 2, 3):
        assert (
            pair.generate(prompt_ids=PROMPT, max_new_tokens=30, exit_layer=exit_layer).token_ids == expected
        )


# --------------------------------------------------------------------------- self: reuse, by call counts


class LayerCalls:
    """Records (layer, first position, number of positions) for every decoder-layer call."""

    def __init__(self, model):
        self.calls: list[tuple[int, int, int]] = []
        self.handles = [
            layer.register_forward_pre_hook(self._hook(i), with_kwargs=True)
            for i, layer in enumerate(model.model.layers)
        ]

    def _hook(self, index):
        def hook(module, args, kwargs):
            positions = kwargs["position_ids"][0]
            self.calls.append((index, int(positions[0]), positions.numel()))

        return hook

    def take(self):
        calls, self.calls = self.calls, []
        return calls


@pytest.mark.parametrize("exit_layer", [1, 2, 3])
def test_self_layers_below_exit_never_see_a_drafted_position_twice(tokenizer, exit_layer):
    model = make_model("llama", layers=4, hidden=64, seed=7)
    expected = reference(model, PROMPT, 30, {0})
    target = CachedLM(model)
    drafter = SelfSpeculativeDrafter(LayerStack(model), exit_layer)
    counter = LayerCalls(model)
    config = EngineConfig(max_new_tokens=30, num_draft_tokens=4)
    rounds = generate_rounds(target, drafter, PROMPT, config, StopCriteria({0}))
    first = next(rounds)
    counter.take()  # the prefill and the first round
    tokens = list(first.committed)
    for r in rounds:
        calls = counter.take()
        tokens += r.committed
        k = len(r.drafted)
        for layer in range(4):
            mine = [(pos, n) for i, pos, n in calls if i == layer]
            seen = [pos + j for pos, n in mine for j in range(n)]
            assert len(seen) == len(set(seen)) == k + 1, (layer, mine)  # each position exactly once
            if layer < exit_layer and k > 0:
                assert len(mine) == k + 1  # k draft steps + the last draft token in the verify
            else:
                assert len(mine) == 1  # one verify call over all k+1 positions
    assert tokens == expected


# --------------------------------------------------------------------------- sampling distribution

# "1 5 2" was followed by 4 (after "3 1 5 2") and by 6 (after "7 1 5 2", the latest): the passage the
# longest match pins drafts 4 (then 0), where a 3-gram's latest follower would draft 6
LOOKUP_PROMPT = [3, 1, 5, 2, 4, 0, 7, 1, 5, 2, 6, 6, 3, 1, 5, 2]
RUNS = 2500


def empirical_joint(target, make_drafter, prompt, cfg, k=2, first_draft=None, fixed_k=False):
    """Counts of the first two tokens over RUNS seeds, and the share of drafted tokens accepted;
    first_draft: what every first round must have drafted (a chain's ids, a tree's node tokens)."""
    counts, drafted, accepted = torch.zeros(V, V), 0, 0
    lm = CachedLM(target)
    for seed in range(RUNS):
        config = EngineConfig(max_new_tokens=2, num_draft_tokens=k, sampling=cfg, seed=seed, fixed_k=fixed_k)
        rounds = list(generate_rounds(lm, make_drafter(), prompt, config, StopCriteria(set())))
        if first_draft is not None:
            assert sorted(rounds[0].drafted) == sorted(first_draft)  # a tree's nodes in any order
        tokens = [t for r in rounds for t in r.committed]
        counts[tokens[0], tokens[1]] += 1
        drafted += sum(len(r.drafted) for r in rounds)
        accepted += sum(r.accepted for r in rounds)
    return counts, accepted / max(1, drafted)


@pytest.fixture(scope="module")
def sampling_target():
    return make_model("llama", V, layers=3, hidden=32, seed=21, init_range=0.6, eos_token_id=None)


@pytest.mark.parametrize("strategy", ["lookup", "lookup tree", "lookup drawn tree", "self"])
def test_sampling_follows_the_target_distribution(sampling_target, strategy):
    """The G-test on the first two tokens; lookup drafts the passage its longest match pins (4: the
    budget of two tokens leaves one draft), and as a tree also the branches the text took: its top
    followers (no vocabulary given) or, as `build` makes it, followers drawn from their shares."""
    cfg = SamplingConfig(1.0, top_k=6)
    first, fixed = None, False
    if strategy == "lookup":
        prompt, make, first = LOOKUP_PROMPT, PromptLookupDrafter, [4]
    elif strategy == "lookup tree":
        prompt, fixed, first = LOOKUP_PROMPT, True, [4, 6]  # 6: after the shorter match "1 5 2"
        make = lambda: PromptLookupDrafter(tree_size=4, tree_width=2)  # noqa: E731
    elif strategy == "lookup drawn tree":  # q: 4 and 6 (escaped from "1 5 2"), drawn in either order
        prompt, fixed, first = LOOKUP_PROMPT, True, [4, 6]
        make = lambda: PromptLookupDrafter(tree_size=4, tree_width=2, vocab_size=V)  # noqa: E731
    else:
        stack = LayerStack(sampling_target)
        prompt, make = [1, 5, 2, 7, 3], lambda: SelfSpeculativeDrafter(stack, 1)
    exact = exact_joint(sampling_target, cfg, prompt)
    observed, acceptance = empirical_joint(
        sampling_target, make, prompt, cfg, first_draft=first, fixed_k=fixed
    )
    assert 0.05 < acceptance < 0.95  # both acceptances and rejections happen
    assert g_test_pvalue(observed, exact) > 1e-3


# --------------------------------------------------------------------------- errors


def test_self_refuses_other_architectures(tokenizer):
    with pytest.raises(UsageError, match="does not support the 'gpt2' architecture"):
        Pair(make_model("gpt2"), tokenizer, strategy="self")


def test_exit_layer_out_of_range_is_a_usage_error(tokenizer):
    pair = Pair(make_model("llama", layers=4), tokenizer, strategy="self")
    with pytest.raises(UsageError, match="between 1 and 3"):
        pair.generate(prompt_ids=PROMPT, max_new_tokens=4, exit_layer=4)


def test_ngram_range_is_checked(tokenizer):
    pair = Pair(make_model("llama"), tokenizer, strategy="lookup")
    with pytest.raises(UsageError, match="ngram-max"):
        pair.generate(prompt_ids=PROMPT, max_new_tokens=4, ngram_min=3, ngram_max=2)
