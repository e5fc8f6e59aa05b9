"""EAGLE-3 and P-EAGLE heads with N > 1 decoder layers (speculators' num_hidden_layers; public P-EAGLE heads
have 4): layer 0 fuses cat(input_norm(embedding), hidden_norm(fc(features))), layers 1..N-1 are plain
Llama decoder layers on the previous layer's output. They draft losslessly, from the true features of the
committed context (every layer's cache is cut back), and their folders round-trip and are checked."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial

import pytest
import torch
from conftest import make_model
from safetensors import safe_open
from safetensors.torch import save_file
from test_eagle import (
    check_commit,
    check_rounds_against_recomputation,
    fit_to_target,
    independent_drafts,
    reference,
)
from test_parallel_drafting import independent_peagle_drafts

from specli.drafters.eagle import EagleDrafter
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.stopping import StopCriteria
from specli.errors import ModelLoadError
from specli.models.cached_lm import CachedLM
from specli.models.eagle_head import EagleHead, HeadCache, init_weights
from specli.models.head_formats import config_to_dict, head_parameter_bytes, load_head, save_head
from specli.training.eagle import head_config, set_vocabulary

LAYERS = 3
PROMPTS = ([3, 44, 17, 250, 9, 81, 12], [7])
LLAMA3_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_type": "llama3"}  # fmt: skip


def make_deep_head(
    target, *, parallel: bool = False, layers: int = LAYERS, seed: int = 0, std: float = 0.05, **overrides
) -> EagleHead:
    """A random N-layer eagle3 head (parallel: a P-EAGLE head with its own embeddings and mask_hidden) for
    target, over a random 3/4 of its vocabulary. Norms are random too, and every weight is exact in
    bfloat16 and float16 (so a saved folder reads back bit for bit)."""
    vocab = target.get_output_embeddings().weight.shape[0]
    config = replace(head_config(target, "eagle3", vocab * 3 // 4, 96), num_layers=layers, **overrides)
    if parallel:
        config = replace(config, mask_token_id=vocab - 2, own_embeddings=True)
    head = init_weights(EagleHead(config), std=std, seed=seed).eval()
    g = torch.Generator().manual_seed(seed + 5)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
        if parallel:
            head.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
            head.mask_hidden.copy_(torch.randn(head.mask_hidden.shape, generator=g) * 0.5)
        for p in head.parameters():
            p.copy_(torch.where(p.abs() < 2**-14, 0, p).bfloat16().float())  # >= 2**-14: float16's too
    set_vocabulary(head, torch.randperm(vocab, generator=g)[: config.draft_vocab_size].sort().values)
    return head


def run(target, head: EagleHead, prompt: list[int], k: int, n: int = 24):
    config = EngineConfig(max_new_tokens=n, num_draft_tokens=k)
    drafter = EagleDrafter(head, target)
    return list(generate_rounds(CachedLM(target), drafter, prompt, config, StopCriteria(set())))


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def target(request):
    return make_model(request.param, 384, layers=5, seed=4, eos_token_id=None).eval()


def test_a_head_has_its_layers():
    """Layer 0 reads [2H] and has a hidden_norm; layers 1..N-1 read [H] and have none. eagle1 stays one
    layer."""
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None)
    head = make_deep_head(target)
    h, c = head.config.hidden_size, head.config
    assert len(head.layers) == LAYERS and head.layer is head.layers[0]
    assert head.layers[0].self_attn.q_proj.weight.shape == (c.num_heads * c.head_dim, 2 * h)
    for layer in head.layers[1:]:
        assert layer.self_attn.q_proj.weight.shape == (c.num_heads * c.head_dim, h)
        assert layer.self_attn.k_proj.weight.shape == (c.num_kv_heads * c.head_dim, h)
        assert not hasattr(layer, "hidden_norm")
    assert head.config.to_dict()["num_layers"] == LAYERS
    with pytest.raises(ValueError, match="one decoder layer"):
        replace(head_config(target, "eagle1", 384, 96), num_layers=2)
    with pytest.raises(ValueError, match="at least one decoder layer"):
        replace(head.config, num_layers=0)


# ----------------------------------------------------------------------------- (a) greedy identity


@pytest.mark.parametrize("parallel", [False, True], ids=["eagle3", "peagle"])
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_output_is_the_targets(target, parallel, k):
    head = make_deep_head(target, parallel=parallel)
    for prompt in PROMPTS:
        rounds = run(target, head, prompt, k)
        assert [t for r in rounds for t in r.committed] == reference(target, prompt, 24), (k, prompt)
        drafted = [r for r in rounds if r.drafted]
        assert drafted and all(r.info["head"] == ("peagle" if parallel else "eagle3") for r in drafted)


# ----------------------------------------------------------------------------- (b) true features only


@pytest.mark.parametrize("parallel", [False, True], ids=["eagle3", "peagle"])
def test_each_round_drafts_from_the_true_features_of_the_committed_context(parallel):
    """Each round's drafts equal the head recomputed from scratch over the committed context's true target
    features: a layer whose cache kept the last round's chain (or placeholders), or lost the features of
    the accepted drafts, drafts differently. The head is fitted to the target's text, so rounds accept
    drafts and reject others."""
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    prompt = [3, 44, 17, 250, 9, 81, 12]
    head = fit_to_target(make_deep_head(target, parallel=parallel, std=0.2), target, prompt)
    fresh = independent_peagle_drafts if parallel else independent_drafts
    rounds = run(target, head, prompt, 3, n=30)
    check_rounds_against_recomputation(rounds, prompt, partial(fresh, target, head))


@pytest.mark.parametrize("parallel", [False, True], ids=["eagle3", "peagle"])
@pytest.mark.parametrize("accepted", [0, 1, 3])
def test_commit_keeps_the_features_of_pending_and_the_accepted_drafts(parallel, accepted):
    """Every layer's cache: after commit(accepted, token) the next draft is the head's from scratch."""
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    head = make_deep_head(target, parallel=parallel, std=0.2)
    fresh = independent_peagle_drafts if parallel else independent_drafts
    check_commit(target, head, accepted, partial(fresh, target, head))


def test_every_layer_is_cut_back_together():
    """The cache keeps one (keys, values) pair per layer; crop cuts them all."""
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None)
    head = make_deep_head(target)
    c = head.config
    cache = HeadCache()
    g = torch.Generator().manual_seed(0)
    features = torch.randn(6, len(c.aux_layers) * c.target_hidden_size, generator=g)
    with torch.no_grad():
        head.step(torch.randn(6, c.hidden_size, generator=g), head.fuse(features), torch.arange(6), cache)
    assert cache.length == 6 and [k.shape[1] for k in cache.keys + cache.values] == [6] * (2 * LAYERS)
    cache.crop(4)
    assert [k.shape[1] for k in cache.keys + cache.values] == [4] * (2 * LAYERS)


# ----------------------------------------------------------------------------- (c), (d) folders


def step_logits(head: EagleHead, seed: int = 5) -> torch.Tensor:
    """Five positions from an empty cache, then one chained step -> draft logits [6, V_draft]."""
    c = head.config
    g = torch.Generator().manual_seed(seed)
    embeds = torch.randn(5, c.hidden_size, generator=g)
    features = torch.randn(5, len(c.aux_layers) * c.target_hidden_size, generator=g)
    cache = HeadCache()
    with torch.no_grad():
        states = head.step(embeds, head.fuse(features), torch.arange(5), cache)
        more = head.step(embeds[:1], states[-1:], torch.tensor([5]), cache)
        return head.draft_logits(torch.cat([states, more]))


@pytest.mark.parametrize("parallel", [False, True], ids=["eagle3", "peagle"])
def test_save_and_load_keep_every_layer(tmp_path, parallel):
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None)
    head = make_deep_head(target, parallel=parallel, seed=3)
    save_head(head, tmp_path / "h", verifier="specli-test/target")
    data = json.loads((tmp_path / "h" / "config.json").read_text())
    assert data["transformer_layer_config"]["num_hidden_layers"] == LAYERS
    c, h = head.config, head.config.hidden_size
    rows = c.num_heads * c.head_dim
    with safe_open(str(tmp_path / "h" / "model.safetensors"), "pt") as f:
        names = set(f.keys())  # noqa: SIM118
        assert f.get_slice("layers.0.self_attn.q_proj.weight").get_shape() == [rows, 2 * h]
        assert f.get_slice("layers.2.self_attn.q_proj.weight").get_shape() == [rows, h]
    assert {f"layers.{i}.mlp.down_proj.weight" for i in range(LAYERS)} <= names
    assert "layers.0.hidden_norm.weight" in names and "layers.1.hidden_norm.weight" not in names
    loaded = load_head(tmp_path / "h", target.config)
    assert loaded.config == head.config and loaded.config.num_layers == LAYERS
    state = loaded.state_dict()
    assert set(state) == set(head.state_dict())
    for name, tensor in head.state_dict().items():
        assert torch.equal(state[name], tensor.to(state[name].dtype)), name
    assert torch.equal(step_logits(loaded), step_logits(head))
    expected = sum(t.numel() * t.element_size() for t in head.to(torch.bfloat16).state_dict().values())
    assert head_parameter_bytes(head.config, torch.bfloat16) == expected


@pytest.mark.parametrize("parallel", [False, True], ids=["eagle3", "peagle"])
def test_safeailab_folder_with_more_layers_loads(tmp_path, parallel):
    """SafeAILab layout (a flat Llama config, midlayer.*): layers 1..N-1 keep their layers.i.* names. A
    P-EAGLE head in it (as vLLM's parallel drafting reads AWS's) names its mask token ptd_token_id and may
    store mask_hidden as [1, F]."""
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    head = make_deep_head(target, parallel=parallel, seed=8)
    c = head.config
    state = {
        ("midlayer." + k[len("layers.0.") :] if k.startswith("layers.0.") else k): v.contiguous()
        for k, v in head.state_dict().items()
    }
    data = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads, "head_dim": c.head_dim, "num_hidden_layers": LAYERS,
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta,
        "max_position_embeddings": c.max_position_embeddings, "vocab_size": c.target_vocab_size,
        "draft_vocab_size": c.draft_vocab_size, "eagle_aux_hidden_state_layer_ids": list(c.aux_layers),
    }  # fmt: skip
    if parallel:
        data["ptd_token_id"] = c.mask_token_id
        state["mask_hidden"] = state["mask_hidden"].reshape(1, -1)
    folder = tmp_path / "h"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    save_file(state, str(folder / "model.safetensors"))
    loaded = load_head(folder, target.config)
    assert loaded.config.num_layers == LAYERS and loaded.config.extra["layout"] == "safeailab"
    assert loaded.config.parallel == parallel and loaded.config.mask_token_id == c.mask_token_id
    assert torch.equal(step_logits(loaded), step_logits(head))
    if parallel:
        assert torch.equal(loaded.placeholders(3), head.placeholders(3))
        rounds = run(target, loaded, PROMPTS[0], 4)
        assert [t for r in rounds for t in r.committed] == reference(target, PROMPTS[0], 24)
        assert all(r.info["parallel"] for r in rounds if r.drafted)


def _write(folder, head: EagleHead, data: dict, drop: str = "", add: dict | None = None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data))
    state = {k: v.contiguous() for k, v in head.state_dict().items() if not (drop and k.startswith(drop))}
    save_file({**state, **(add or {})}, str(folder / "model.safetensors"))
    return folder


def test_a_folder_missing_a_layer_is_refused(tmp_path):
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None)
    head = make_deep_head(target)
    data = config_to_dict(head.config)
    with pytest.raises(ModelLoadError, match=r"missing layers\.2\.input_layernorm\.weight"):
        load_head(_write(tmp_path / "missing", head, data, drop="layers.2."), target.config)
    # The other way round: weights of a third layer the config does not announce.
    data["transformer_layer_config"]["num_hidden_layers"] = 2
    with pytest.raises(ModelLoadError, match=r"unexpected layers\.2\."):
        load_head(_write(tmp_path / "extra", head, data), target.config)


def test_an_eagle1_folder_with_more_layers_is_refused(tmp_path):
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None)
    head = init_weights(EagleHead(head_config(target, "eagle1", 384, 96)), seed=1)
    data = config_to_dict(head.config)
    data["transformer_layer_config"]["num_hidden_layers"] = 2
    with pytest.raises(ModelLoadError, match="an eagle1 head has one decoder layer, not 2"):
        load_head(_write(tmp_path / "h", head, data), target.config)


# ----------------------------------------------------------------------------- (e) transformers' layer


@pytest.mark.parametrize("rope", [None, LLAMA3_ROPE], ids=["rope", "llama3-rope"])
def test_later_layers_are_transformers_llama_decoder_layers(rope):
    """speculators builds layers 1..N-1 as transformers' LlamaDecoderLayer (one rotary embedding for all):
    layer 0's output run through LlamaDecoderLayers holding the same weights gives the head's states, in
    one step and in two steps over the cache."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None)
    head = make_deep_head(target, std=0.2, rope_theta=500000.0, rope_scaling=rope)
    c = head.config
    llama = LlamaConfig(
        hidden_size=c.hidden_size, intermediate_size=c.intermediate_size, num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        max_position_embeddings=c.max_position_embeddings, hidden_act="silu",
        rope_parameters={**(rope or {"rope_type": "default"}), "rope_theta": c.rope_theta},
    )  # fmt: skip
    llama._attn_implementation = "eager"
    layers = []
    for i in range(1, LAYERS):
        layer = LlamaDecoderLayer(llama, layer_idx=i).eval()
        layer.load_state_dict(head.layers[i].state_dict())  # strict: the same names and shapes
        layers.append(layer)
    rotary = LlamaRotaryEmbedding(llama)

    n = 9
    g = torch.Generator().manual_seed(1)
    embeds = torch.randn(n, c.hidden_size, generator=g)
    features = torch.randn(n, len(c.aux_layers) * c.target_hidden_size, generator=g)
    positions = torch.arange(30, 30 + n)
    mask = torch.full((n, n), -float("inf")).triu(1)[None, None]  # [1, 1, n, n] causal
    with torch.no_grad():
        hidden = head.fuse(features)
        x = head.layer.forward_eagle3(embeds, hidden, positions, HeadCache())[None]  # [1, n, H]
        cos_sin = rotary(x, positions[None])
        for layer in layers:
            x = layer(x, attention_mask=mask, position_ids=positions[None], position_embeddings=cos_sin)
        expected = x[0]
        whole = head.step(embeds, hidden, positions, HeadCache())
        cache = HeadCache()
        first = head.step(embeds[:5], hidden[:5], positions[:5], cache)
        rest = head.step(embeds[5:], hidden[5:], positions[5:], cache)
    torch.testing.assert_close(whole, expected)
    torch.testing.assert_close(torch.cat([first, rest]), expected, rtol=1e-4, atol=1e-4)  # other sums
