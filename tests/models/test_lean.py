"""The lean drafter steps (docs/design.md §13): specli's own forward of Llama-family draft models and of
EAGLE heads gives the model's own logits (float tolerance) for prefills, single steps, rewinds and
parallel passes; anything it does not reproduce falls back to the model's forward with the reason; and
drafting through it keeps the target's greedy output."""

from __future__ import annotations

import pytest
import torch
from conftest import make_model, save_model
from test_engine import reference
from test_head_layers import LLAMA3_ROPE, make_deep_head

import specli
from specli.models.eagle_head import HeadCache
from specli.models.own_forward.core import MIN_CAPACITY, LeanKV, causal_mask
from specli.models.own_forward.decoder import LeanDecoder, LeanUnsupported
from specli.models.own_forward.head import LeanHead
from specli.training.eagle import head_config

VOCAB = 384
LEAN_ARCHS = {
    "llama": {},
    "llama-biases": {"attention_bias": True, "mlp_bias": True},
    "qwen2": {},  # q/k/v biases
    "qwen3": {},  # q/k norms
    "mistral": {"sliding_window": 8},  # a window the sequences below pass
    "qwen2-window": {"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1},
}


def lean_model(name: str, layers: int = 2, max_positions: int = 512):
    arch = name.split("-")[0]
    model = make_model(arch, VOCAB, layers=layers, seed=3, max_positions=max_positions, **LEAN_ARCHS[name])
    with torch.no_grad():  # biases and norms away from their init, so a dropped one shows
        for n, p in model.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(0.1 * torch.randn(p.shape))
    return model


def full_logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=ids[None], use_cache=False).logits[0]  # [n, V]


@pytest.mark.parametrize("name", list(LEAN_ARCHS))
def test_lean_logits_equal_the_models_own(name):
    """Prefill, single steps (last only), a rewind, a parallel pass, a long run past the first capacity:
    every row equals the model's full forward at that position."""
    model = lean_model(name)
    lean, why = LeanDecoder.build(model)
    assert lean is not None, why
    ids = torch.randint(1, VOCAB, (MIN_CAPACITY + 40,), generator=torch.Generator().manual_seed(1))
    expected = full_logits(model, ids)
    cache = lean.new_cache()
    got = [lean.forward(ids[:7], cache)]  # prefill [7, V]
    for i in range(7, 12):  # single steps
        got.append(lean.forward(ids[i : i + 1], cache, last_only=True))
    lean.rewind(cache, 3)  # drop 9..11, run them again as one pass with 12..15
    got = got[:-3]
    got.append(lean.forward(ids[9:16], cache))
    got.append(lean.forward(ids[16:], cache))  # past MIN_CAPACITY: the cache grows mid-generation
    assert cache.length == len(ids) and cache.capacity > MIN_CAPACITY
    torch.testing.assert_close(torch.cat(got), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_a_pass_after_a_long_rewind_attends_only_the_kept_positions(name):
    """Stale keys past the cache length are never read: a rewound cache then a different continuation
    equals the model's forward over the kept prefix + the new tokens."""
    model = lean_model(name)
    lean, _ = LeanDecoder.build(model)
    ids = torch.arange(1, 41)
    cache = lean.new_cache()
    lean.forward(ids, cache)
    lean.rewind(cache, 25)
    other = torch.arange(100, 112)
    got = lean.forward(other, cache)  # [12, V] at positions 15..26
    expected = full_logits(model, torch.cat([ids[:15], other]))[15:]
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_unsupported_models_fall_back_with_the_reason():
    for arch, words in (("gpt2", "architecture 'gpt2'"), ("gemma", "architecture 'gemma'")):
        lean, why = LeanDecoder.build(make_model(arch, VOCAB, layers=1))
        assert lean is None and words in why
    model = make_model("llama", VOCAB, layers=1, hidden_act="gelu")
    assert LeanDecoder.build(model) == (None, "activation 'gelu'")
    model = make_model("llama", VOCAB, layers=1, rope_parameters={"rope_type": "dynamic", "factor": 2.0})
    assert "rotary embedding 'dynamic'" in LeanDecoder.build(model)[1]


def test_the_probe_refuses_a_lean_forward_that_differs():
    """A lean forward that does not reproduce the model (here: a norm weight it reads wrongly) is caught
    at build time, so the drafter keeps the model's forward."""
    model = lean_model("llama")
    lean = LeanDecoder(model)
    lean.probe()  # the true weights pass
    lean.layers[1].post_norm = lean.layers[1].post_norm * 1.01
    with pytest.raises(LeanUnsupported, match="differ from the model's own forward"):
        lean.probe()


def test_fused_qkv_reads_the_models_weights_without_changing_them():
    model = lean_model("qwen2")
    before = {n: p.detach().clone() for n, p in model.state_dict().items()}
    lean, _ = LeanDecoder.build(model)
    assert len(lean.layers[0].qkv) == 1  # small: fused
    after = model.state_dict()
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert all(not t.is_inference() for t in after.values())  # still trainable / savable


def test_causal_mask_with_a_window():
    mask = causal_mask(3, 2, 2, torch.device("cpu"))  # queries at 3, 4 over keys 0..4
    assert mask.tolist() == [[False, False, True, True, False], [False, False, False, True, True]]
    assert causal_mask(0, 3, None, torch.device("cpu")).tolist() == [
        [True, False, False], [True, True, False], [True, True, True]
    ]  # fmt: skip


def test_lean_kv_rewinds_by_position_and_refuses_too_far():
    kv = LeanKV.empty(1, 2, 4, torch.float32, torch.device("cpu"))
    kv.reserve(3)
    keys, _ = kv.write(0, torch.ones(2, 3, 4), torch.ones(2, 3, 4))
    kv.advance(3)
    assert keys.shape == (2, 3, 4) and kv.length == 3
    kv.rewind(2)
    assert kv.length == 1
    with pytest.raises(ValueError):
        kv.rewind(2)


# --- EAGLE heads -----------------------------------------------------------------------------------


def heads_for(target):
    """eagle1, eagle3 (1 and 3 layers, GQA, norm before residual, Llama 3 rope) and P-EAGLE heads."""
    from dataclasses import replace

    from specli.models.eagle_head import EagleHead, init_weights

    eagle1 = init_weights(EagleHead(head_config(target, "eagle1", VOCAB, 96)), std=0.05, seed=1).eval()
    yield "eagle1", eagle1
    yield "eagle3", make_deep_head(target, layers=1)
    yield "eagle3x3", make_deep_head(target, layers=3, norm_before_residual=True)
    yield "eagle3-llama3-rope", make_deep_head(target, layers=2, rope_scaling=LLAMA3_ROPE)
    head = make_deep_head(target, parallel=True, layers=2)
    yield "peagle", head
    gqa = make_deep_head(target, layers=2)
    yield "eagle3-gqa", replace_head(gqa, replace(gqa.config, num_kv_heads=2))


def replace_head(head, config):
    """A head of `config` with random weights (the shapes change with it)."""
    from specli.models.eagle_head import EagleHead, init_weights

    return init_weights(EagleHead(config), std=0.05, seed=4).eval()


def head_steps(step, new_cache, crop, head, hidden_size: int):
    """A prefill of 6 positions, 3 chain steps, a crop to 7, a pass of 4: every output state."""
    g = torch.Generator().manual_seed(9)
    embeds = torch.randn(20, hidden_size, generator=g)
    hidden = torch.randn(20, hidden_size, generator=g)
    cache = new_cache()
    out = [step(embeds[:6], hidden[:6], cache)]
    state = out[0][-1:]
    for i in range(6, 9):
        state = step(embeds[i : i + 1], state, cache)
        out.append(state)
    crop(cache, 7)
    out.append(step(embeds[9:13], hidden[9:13], cache))
    return torch.cat(out)


def test_lean_head_step_equals_the_heads_own():
    target = make_model("llama", VOCAB, layers=4, seed=2)
    for name, head in heads_for(target):
        lean = LeanHead(head)
        size = head.config.hidden_size

        def own(embeds, hidden, cache, head=head):
            positions = torch.arange(cache.length, cache.length + embeds.shape[0])
            with torch.inference_mode():
                return head.step(embeds, hidden, positions, cache)

        expected = head_steps(own, HeadCache, lambda c, n: c.crop(n), head, size)
        got = head_steps(lean.step, lean.new_cache, lambda c, n: c.crop(n), head, size)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, msg=name)


# --- through the engine ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["qwen3", "mistral", "llama-biases"])
def test_drafting_through_the_lean_step_keeps_the_targets_greedy_output(tmp_path, tokenizer, name):
    vocab = len(tokenizer)
    arch = name.split("-")[0]
    target = make_model(arch, vocab, layers=3, seed=11, eos_token_id=None, **LEAN_ARCHS[name])
    draft = make_model(arch, vocab, layers=1, seed=12, eos_token_id=None, **LEAN_ARCHS[name])
    pair = specli.load(
        target=str(save_model(tmp_path / "t", target, tokenizer)),
        draft=str(save_model(tmp_path / "d", draft, tokenizer)),
        device="cpu",
    )
    pair.eos_ids = set()
    assert pair.drafter_step() == "lean"
    ids = pair.encode("def fibonacci(n):", chat=False)
    for k in (1, 4):
        result = pair.generate(prompt_ids=ids, max_new_tokens=40, num_draft_tokens=k)
        assert result.token_ids == reference(pair, ids, 40, set())
        assert result.stats.drafted > 0


def test_lean_and_transformers_drafters_propose_the_same(tmp_path, tokenizer):
    """Same drafts, same acceptance, round by round, with the lean step on and off (greedy)."""
    vocab = len(tokenizer)
    target = save_model(tmp_path / "t", make_model("llama", vocab, layers=3, seed=1), tokenizer)
    draft = save_model(tmp_path / "d", make_model("llama", vocab, layers=2, seed=2), tokenizer)
    runs = []
    for lean in (True, False):
        pair = specli.load(target=str(target), draft=str(draft), device="cpu", lean=lean)
        pair.eos_ids = set()
        result = pair.generate("import os", max_new_tokens=40, num_draft_tokens=4)
        runs.append([(r.drafted, r.accepted) for r in result.rounds])
    assert runs[0] == runs[1]


def test_drafter_step_says_what_ran(tmp_path, tokenizer):
    vocab = len(tokenizer)
    target = save_model(tmp_path / "t", make_model("llama", vocab, layers=2, seed=1), tokenizer)
    gpt2 = save_model(tmp_path / "g", make_model("gpt2", vocab, layers=1, seed=2), tokenizer)
    pair = specli.load(target=str(target), draft=str(gpt2), device="cpu")
    assert pair.drafter_step() == (
        "transformers (architecture 'gpt2' (lean steps cover llama, mistral, qwen2, qwen3))"
    )
    assert pair.drafter_step("lookup") is None
    tiny = specli.load(strategy=["eagle", "draft"], device="cpu")
    assert tiny.drafter_step() == "lean" and tiny.drafter_step("draft") == "lean"
