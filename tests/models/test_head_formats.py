"""specli.models.head_formats: EAGLE heads of every layout (speculators, specli eagle1, SafeAILab as
safetensors and as pytorch_model.bin) built here with random weights, written to disk and loaded through
the user's path (local folder and an offline hub cache); heads that do not fit the target are refused
before any weights file is opened. Offline, CPU, tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import make_model, save_model
from safetensors.torch import save_file
from test_loading import lay_out_hub_cache

from specli.errors import ModelLoadError, UsageError
from specli.models import loading
from specli.models.eagle_head import EagleHead, HeadCache, HeadConfig, default_aux_layers, init_weights
from specli.models.head_formats import (
    check_head,
    config_to_dict,
    head_parameter_bytes,
    load_head,
    open_head,
    read_head_config,
    refuse_head_as_model,
    save_head,
)
from specli.models.model_dirs import read_config

LAYERS, HIDDEN, DRAFT_VOCAB = 6, 64, 100
REPO_PRESETS = Path(__file__).resolve().parents[2] / "presets"

pytestmark = pytest.mark.usefixtures("no_network")


@pytest.fixture(scope="module")
def target(tmp_path_factory, tokenizer):
    """(folder, config dict, model) of a 6-layer llama target, hidden 64."""
    model = make_model("llama", len(tokenizer), layers=LAYERS, hidden=HIDDEN, seed=3)
    folder = save_model(tmp_path_factory.mktemp("target"), model, tokenizer)
    return folder, read_config(folder), model


# ----------------------------------------------------------------------------- building heads


def head_config(vocab: int, kind: str = "eagle3", **overrides) -> HeadConfig:
    kw = dict(
        kind=kind,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        target_hidden_size=HIDDEN,
        target_vocab_size=vocab,
        draft_vocab_size=DRAFT_VOCAB if kind == "eagle3" else vocab,
        aux_layers=default_aux_layers(LAYERS) if kind == "eagle3" else (LAYERS,),
        rope_theta=500000.0,
        norm_before_residual=kind == "eagle3",
        fc_bias=kind == "eagle1",
    )
    kw.update(overrides)
    return HeadConfig(**kw)


def random_head(config: HeadConfig, seed: int = 0) -> EagleHead:
    """Random weights (norms too), a random reduced vocabulary; values exact in bfloat16 (how specli
    writes heads) and in float16 (how other layouts store them)."""
    head = init_weights(EagleHead(config), std=0.05, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            p.copy_(torch.where(p.abs() < 2**-14, 0, p).bfloat16().float())  # >= 2**-14: float16's too
    if config.kind == "eagle3" and config.reduced_vocab:
        ids = torch.randperm(config.target_vocab_size, generator=g)[: config.draft_vocab_size].sort().values
        head.d2t.copy_(ids - torch.arange(config.draft_vocab_size))
        head.t2d.zero_()
        head.t2d[ids] = True
    return head.eval()


def safeailab_dict(config: HeadConfig, **extra) -> dict:
    """A SafeAILab hub head's config.json: a LlamaForCausalLM config plus draft_vocab_size."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "max_position_embeddings": config.max_position_embeddings,
        "vocab_size": config.target_vocab_size,
        "draft_vocab_size": config.draft_vocab_size,
        "torch_dtype": "float16",
        **extra,
    }


def safeailab_state(head: EagleHead) -> dict[str, torch.Tensor]:
    return {
        ("midlayer." + k[len("layers.0.") :] if k.startswith("layers.0.") else k): v.clone().contiguous()
        for k, v in head.state_dict().items()
    }


def write_safeailab(folder: Path, head: EagleHead, *, pickle: bool = False, **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(safeailab_dict(head.config, **extra)))
    if pickle:
        torch.save(safeailab_state(head), folder / "pytorch_model.bin")
    else:
        save_file(safeailab_state(head), str(folder / "model.safetensors"))
    return folder


def write_config_only(folder: Path, data: dict, corrupt_weights: bool = True) -> Path:
    """A head folder whose weights file is garbage: any attempt to open it fails differently."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(data))
    if corrupt_weights:
        (folder / "model.safetensors").write_bytes(b"\xff" * 64)
    return folder


def step_logits(head: EagleHead, target_model=None, seed: int = 5) -> torch.Tensor:
    """One head step over 5 positions (from an empty cache), then a 1-token chained step -> logits."""
    c = head.config
    g = torch.Generator().manual_seed(seed)
    width = len(c.aux_layers) * c.target_hidden_size if c.kind == "eagle3" else c.hidden_size
    embeds, features = torch.randn(5, c.hidden_size, generator=g), torch.randn(5, width, generator=g)
    cache = HeadCache()
    with torch.no_grad():
        states = head.step(embeds, head.fuse(features), torch.arange(5), cache)
        more = head.step(embeds[:1], states[-1:], torch.tensor([5]), cache)
        lm = target_model.get_output_embeddings() if target_model is not None else None
        return head.draft_logits(torch.cat([states, more]), lm)


def assert_same_state(loaded: EagleHead, written: dict[str, torch.Tensor]) -> None:
    state = loaded.state_dict()
    assert set(state) == set(written)
    for k, v in written.items():
        assert state[k].dtype == (v.dtype if not v.is_floating_point() else torch.float32), k
        assert torch.equal(state[k], v.to(state[k].dtype)), k


# ----------------------------------------------------------------------------- the three layouts load


def test_speculators_round_trip(tmp_path, target):
    """save_head -> load_head: the layout specli writes (and vLLM reads) comes back tensor for tensor."""
    folder, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size))
    save_head(head, tmp_path / "h", verifier="specli-test/target")
    loaded = load_head(tmp_path / "h", config_dict, name="h")
    assert loaded.config == head.config and not loaded.training
    assert loaded.config.extra["layout"] == "speculators"
    assert loaded.config.extra["verifier"] == "specli-test/target"
    assert_same_state(loaded, head.state_dict())
    assert torch.equal(step_logits(loaded), step_logits(head))
    assert step_logits(loaded).shape == (6, DRAFT_VOCAB)


def test_speculators_hub_head_defaults_and_drops_embeddings(tmp_path, target):
    """A hub speculators head: aux layer ids null (the target's defaults), target_hidden_size null, an
    embed_tokens copy in the file (dropped: the head uses the target's)."""
    _, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size), seed=7)
    data = config_to_dict(head.config, "org/target")
    data["eagle_aux_hidden_state_layer_ids"] = None
    data["target_hidden_size"] = None
    folder = write_config_only(tmp_path / "h", data, corrupt_weights=False)
    state = {k: v.contiguous() for k, v in head.state_dict().items()}
    save_file(
        {**state, "embed_tokens.weight": torch.randn(model.config.vocab_size, HIDDEN)},
        str(folder / "model.safetensors"),
    )
    loaded = load_head(folder, model.config)  # a transformers config works as well as a dict
    assert loaded.config.aux_layers == default_aux_layers(LAYERS) == (2, 3, 3)
    assert loaded.config.extra["aux_defaulted"] is True
    assert loaded.config.target_hidden_size == HIDDEN
    assert_same_state(loaded, state)
    assert torch.equal(step_logits(loaded), step_logits(head))
    # The lead's call without a target config still works when the depth is given.
    assert load_head(folder, target_layers=LAYERS).config.aux_layers == (2, 3, 3)


def test_eagle1_round_trip(tmp_path, target):
    _, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size, kind="eagle1"))
    save_head(head, tmp_path / "h1")
    loaded = load_head(tmp_path / "h1", config_dict)
    assert loaded.config.kind == "eagle1" and loaded.config.fc_bias
    assert_same_state(loaded, head.state_dict())
    assert torch.equal(step_logits(loaded, model), step_logits(head, model))


@pytest.mark.parametrize("pickle", [False, True], ids=["safetensors", "pytorch_model.bin"])
def test_safeailab_head_loads(tmp_path, target, pickle):
    """midlayer.* -> layers.0.*, aux layers from the target's depth, no norm before residual, d2t/t2d kept."""
    _, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size, norm_before_residual=False), seed=11)
    folder = write_safeailab(tmp_path / "hub", head, pickle=pickle)
    loaded = load_head(folder, config_dict, allow_pickle=pickle, name="yuhuili/x")
    assert loaded.config.extra["layout"] == "safeailab"
    assert loaded.config.aux_layers == default_aux_layers(LAYERS)
    assert not loaded.config.norm_before_residual
    assert loaded.config.head_dim == HIDDEN // 4
    assert_same_state(loaded, head.state_dict())
    assert torch.equal(step_logits(loaded), step_logits(head))
    ids = loaded.draft_to_target()
    assert torch.equal(ids, torch.nonzero(loaded.t2d).flatten())


def test_safeailab_target_hidden_and_eagle_config_layers(tmp_path, target):
    """target_hidden_size and eagle_config.eagle_aux_hidden_state_layer_ids (SpecForge) are honoured."""
    _, config_dict, model = target
    config = head_config(
        model.config.vocab_size,
        hidden_size=32,
        intermediate_size=48,
        head_dim=8,
        aux_layers=(1, 4, 6),
        norm_before_residual=False,
    )
    head = random_head(config, seed=2)
    folder = write_safeailab(
        tmp_path / "hub",
        head,
        target_hidden_size=HIDDEN,
        head_dim=8,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 4, 6]},
    )
    loaded = load_head(folder, config_dict)
    assert loaded.fc.weight.shape == (32, 3 * HIDDEN)
    assert loaded.config.aux_layers == (1, 4, 6)
    assert torch.equal(step_logits(loaded), step_logits(head))


def test_dtype_and_device(tmp_path, target):
    _, config_dict, model = target
    save_head(random_head(head_config(model.config.vocab_size)), tmp_path / "h")
    loaded = load_head(tmp_path / "h", config_dict, dtype=torch.bfloat16, device="cpu")
    assert loaded.fc.weight.dtype is torch.bfloat16 and loaded.d2t.dtype is torch.long
    assert loaded.t2d.dtype is torch.bool and loaded.fc.weight.device.type == "cpu"


# ----------------------------------------------------------------------------- offline hub cache


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty hub cache with HF_HUB_OFFLINE=1; returns a function laying a head folder into it."""
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    def add(repo_id: str, folder: Path) -> Path:
        return lay_out_hub_cache(cache, repo_id, folder)

    return add


@pytest.mark.parametrize("pickle", [False, True], ids=["safetensors", "pytorch_model.bin"])
def test_hub_heads_load_offline(tmp_path, target, hub, pickle):
    _, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size, norm_before_residual=False), seed=4)
    snapshot = hub("yuhuili/EAGLE3-tiny", write_safeailab(tmp_path / "src", head, pickle=pickle))
    assert loading.resolve_source("yuhuili/EAGLE3-tiny", allow_pickle=pickle).resolve() == snapshot.resolve()
    loaded = open_head("yuhuili/EAGLE3-tiny", config_dict, allow_pickle=pickle)
    assert_same_state(loaded, head.state_dict())
    assert torch.equal(step_logits(loaded), step_logits(head))


def test_hub_speculators_head_offline(tmp_path, target, hub):
    _, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size), seed=8)
    save_head(head, tmp_path / "src", verifier="specli-test/target")
    hub("RedHatAI/tiny-speculator.eagle3", tmp_path / "src")
    loaded = open_head("RedHatAI/tiny-speculator.eagle3", config_dict)
    assert_same_state(loaded, head.state_dict())


def test_hub_pickle_head_needs_the_flag(tmp_path, target, hub):
    _, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size), seed=9)
    hub("yuhuili/EAGLE3-pickle", write_safeailab(tmp_path / "src", head, pickle=True))
    with pytest.raises(ModelLoadError) as info:
        open_head("yuhuili/EAGLE3-pickle", config_dict)
    message = str(info.value)
    assert "'yuhuili/EAGLE3-pickle' ships pickle weights (pytorch_model.bin)" in message
    assert "--allow-pickle" in message and info.value.exit_code == 1


def test_hub_head_that_does_not_fit_fetches_no_weights(tmp_path, target, hub, monkeypatch):
    """open_head asks for config.json first (weights=False) and stops there when the head does not fit."""
    _, config_dict, model = target
    config = head_config(model.config.vocab_size, target_hidden_size=128)
    hub("org/wide-head", write_config_only(tmp_path / "src", config_to_dict(config)))
    calls = []
    real = loading.resolve_source

    def recording(source, **kwargs):
        calls.append(kwargs.get("weights", True))
        return real(source, **kwargs)

    monkeypatch.setattr(loading, "resolve_source", recording)
    with pytest.raises(ModelLoadError, match="expects target hidden size 128 but 'x' has 64"):
        open_head("org/wide-head", config_dict, target_name="x")
    assert calls == [False]


# ----------------------------------------------------------------------------- refusals before weights


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"target_hidden_size": 128},
            "the EAGLE head 'h' expects target hidden size 128 but 'tgt' has 64.",
        ),
        (
            {"target_vocab_size": 999},
            "the EAGLE head 'h' expects a target vocabulary of 999 tokens but 'tgt' has {vocab}.",
        ),
        (
            {"aux_layers": (2, 3, 9)},
            "the EAGLE head 'h' reads target layers [2, 3, 9] but 'tgt' has 6 layers (valid: 0..6).",
        ),
        (
            {"aux_layers": (-1, 3, 4)},
            "the EAGLE head 'h' reads target layers [-1, 3, 4] but 'tgt' has 6 layers",
        ),
    ],
    ids=["hidden", "vocab", "layer-too-deep", "layer-negative"],
)
@pytest.mark.parametrize("layout", ["speculators", "safeailab"])
def test_head_that_does_not_fit_is_refused_before_weights(tmp_path, target, change, expected, layout):
    """The weights file is garbage: had it been opened, the error would be a different one."""
    _, config_dict, model = target
    vocab = model.config.vocab_size
    config = head_config(vocab, **change)
    if layout == "speculators":
        data = config_to_dict(config, "org/other-target")
    else:
        extra = {"target_hidden_size": config.target_hidden_size}
        if "aux_layers" in change:
            extra["eagle_aux_hidden_state_layer_ids"] = list(config.aux_layers)
        data = safeailab_dict(config, **extra)
    folder = write_config_only(tmp_path / "h", data)
    with pytest.raises(ModelLoadError) as info:
        load_head(folder, {**config_dict, "_name_or_path": "tgt"}, name="h")
    message = str(info.value)
    assert expected.format(vocab=vocab) in message
    assert info.value.exit_code == 1 and info.value.hint
    if layout == "speculators":
        assert "trained for 'org/other-target'" in info.value.hint


def test_eagle1_head_of_another_width_is_refused(tmp_path, target):
    _, config_dict, model = target
    config = head_config(
        model.config.vocab_size, kind="eagle1", hidden_size=32, target_hidden_size=32, head_dim=8
    )
    folder = write_config_only(tmp_path / "h", config_to_dict(config))
    with pytest.raises(ModelLoadError, match="expects target hidden size 32 but the target has 64"):
        load_head(folder, config_dict, name="h")


def test_check_head_on_configs_alone(target):
    """check_head takes the target's config as a dict or as a transformers config."""
    _, config_dict, model = target
    fits = head_config(model.config.vocab_size)
    check_head(fits, config_dict, "h")
    check_head(fits, model.config, "h")
    with pytest.raises(ModelLoadError, match="drafts over 999 tokens, more than its target vocabulary"):
        check_head(head_config(model.config.vocab_size, draft_vocab_size=999), {"vocab_size": None}, "h")


def test_pickle_head_refused_without_the_flag(tmp_path, target):
    _, config_dict, model = target
    folder = write_safeailab(tmp_path / "h", random_head(head_config(model.config.vocab_size)), pickle=True)
    with pytest.raises(ModelLoadError, match=r"'h' ships pickle weights \(pytorch_model.bin\)") as info:
        load_head(folder, config_dict, name="h")
    assert "--allow-pickle" in str(info.value)


def test_pickle_is_loaded_with_weights_only(tmp_path, target, monkeypatch):
    _, config_dict, model = target
    folder = write_safeailab(tmp_path / "h", random_head(head_config(model.config.vocab_size)), pickle=True)
    seen = []
    real = torch.load

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    load_head(folder, config_dict, allow_pickle=True)
    assert seen and all(kw.get("weights_only") is True and kw.get("map_location") == "cpu" for kw in seen)


def test_unsupported_architectures_are_refused(tmp_path, target):
    _, config_dict, model = target
    data = config_to_dict(head_config(model.config.vocab_size))
    data["transformer_layer_config"]["model_type"] = "qwen3"
    with pytest.raises(ModelLoadError, match="built on a 'qwen3' decoder layer"):
        load_head(write_config_only(tmp_path / "q", data), config_dict)
    data = config_to_dict(head_config(model.config.vocab_size))
    data["norm_before_fc"] = True
    with pytest.raises(ModelLoadError, match="uses norm_before_fc"):
        load_head(write_config_only(tmp_path / "n", data), config_dict)
    data = config_to_dict(head_config(model.config.vocab_size))
    data["speculators_model_type"] = "mlp"
    with pytest.raises(ModelLoadError, match="is a 'mlp' speculator"):
        load_head(write_config_only(tmp_path / "m", data), config_dict)


def test_a_plain_model_is_not_an_eagle_head(target):
    folder, config_dict, _ = target
    with pytest.raises(ModelLoadError, match="is not an EAGLE head"):
        load_head(folder, config_dict, name="t")


def test_head_without_layers_needs_the_target_depth(tmp_path, target):
    _, _, model = target
    head = random_head(head_config(model.config.vocab_size))
    folder = write_safeailab(tmp_path / "h", head)
    with pytest.raises(ModelLoadError, match="does not name the target layers"):
        read_head_config(folder)
    assert read_head_config(folder, target_layers=10).aux_layers == (2, 5, 7)


def test_missing_config(tmp_path):
    with pytest.raises(ModelLoadError, match="has no config.json"):
        load_head(tmp_path, name="empty")


# ----------------------------------------------------------------------------- weights checked by shape


def test_weight_shapes_are_checked_from_the_header(tmp_path, target, monkeypatch):
    """A file whose tensors do not match its config: refused from the safetensors header, no tensor read."""
    _, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size))
    folder = write_safeailab(
        tmp_path / "h", random_head(head_config(model.config.vocab_size, intermediate_size=96))
    )
    (folder / "config.json").write_text(json.dumps(safeailab_dict(head.config)))
    import safetensors

    real = safetensors.safe_open
    reads = []

    class Spy:
        def __init__(self, *args, **kwargs):
            self.inner = real(*args, **kwargs)

        def __enter__(self):
            self.f = self.inner.__enter__()
            return self

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

        def keys(self):
            return self.f.keys()

        def get_slice(self, key):
            return self.f.get_slice(key)

        def get_tensor(self, key):
            reads.append(key)
            return self.f.get_tensor(key)

    monkeypatch.setattr(safetensors, "safe_open", Spy)
    with pytest.raises(ModelLoadError) as info:
        load_head(folder, config_dict, name="h")
    message = str(info.value)
    assert "weight layers.0.mlp." in message
    assert ("[64, 96]" in message and "[64, 128]" in message) or (
        "[96, 64]" in message and "[128, 64]" in message
    )
    assert reads == []


def test_missing_and_unexpected_weights_are_named(tmp_path, target):
    _, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size))
    folder = write_safeailab(tmp_path / "h", head)
    state = safeailab_state(head)
    del state["midlayer.hidden_norm.weight"], state["lm_head.weight"]
    state["midlayer.self_attn.q_norm.weight"] = torch.ones(16)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(ModelLoadError) as info:
        load_head(folder, config_dict, name="h")
    message = str(info.value)
    assert "missing layers.0.hidden_norm.weight, lm_head.weight" in message
    assert "unexpected layers.0.self_attn.q_norm.weight" in message


def test_draft_vocabulary_map_out_of_range(tmp_path, target):
    _, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size))
    head.d2t[-1] = model.config.vocab_size  # the last draft token maps past the target's vocabulary
    folder = write_safeailab(tmp_path / "h", head)
    with pytest.raises(
        ModelLoadError, match="maps draft tokens to target ids .* outside the target vocabulary"
    ):
        load_head(folder, config_dict, name="h")


def test_sharded_safetensors(tmp_path, target):
    _, config_dict, model = target
    head = random_head(head_config(model.config.vocab_size), seed=12)
    state = safeailab_state(head)
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(safeailab_dict(head.config)))
    first = {k: v for k, v in state.items() if k.startswith("midlayer.")}
    rest = {k: v for k, v in state.items() if k not in first}
    save_file(first, str(folder / "model-00001-of-00002.safetensors"))
    save_file(rest, str(folder / "model-00002-of-00002.safetensors"))
    weight_map = {k: "model-00001-of-00002.safetensors" for k in first}
    weight_map |= {k: "model-00002-of-00002.safetensors" for k in rest}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert_same_state(load_head(folder, config_dict), head.state_dict())


def test_head_parameter_bytes(target):
    _, _, model = target
    head = random_head(head_config(model.config.vocab_size)).to(torch.bfloat16)
    expected = sum(t.numel() * t.element_size() for t in head.state_dict().values())
    assert head_parameter_bytes(head.config, torch.bfloat16) == expected


# ----------------------------------------------------------------------------- presets

EAGLE_PRESETS = {
    "llama-8b-eagle3": (
        "meta-llama/Llama-3.1-8B-Instruct",
        "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
    ),
    "llama-70b-eagle3": (
        "meta-llama/Llama-3.3-70B-Instruct",
        "RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3",
    ),
    "qwen3-8b-eagle3": ("Qwen/Qwen3-8B", "RedHatAI/Qwen3-8B-speculator.eagle3"),
}


@pytest.mark.parametrize("name", sorted(EAGLE_PRESETS))
def test_eagle_presets(name):
    from specli.presets import Preset, load_preset_file

    path = REPO_PRESETS / f"{name}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    target_id, head_id = EAGLE_PRESETS[name]
    assert data["name"] == name and data["strategy"] == "eagle"
    assert data["target"]["model"] == target_id and data["draft"]["model"] == head_id
    assert "safetensors" in data["notes"] and "--allow-pickle" in data["notes"]
    assert (data["target"].get("quantization") == "4bit") == (name == "llama-70b-eagle3")
    from specli.settings import STRATEGIES

    strategies = STRATEGIES
    if "eagle" in strategies:
        assert load_preset_file(path).draft.model == head_id
    else:  # the schema does not know the strategy yet: every other field must pass it
        Preset.model_validate({**data, "strategy": "draft"})


# ----------------------------------------------------------------------------- a head given as a model


@pytest.mark.parametrize("head", ["embedded:tiny-eagle3", "embedded:tiny-peagle", "embedded:tiny-eagle1"])
def test_an_eagle_head_given_as_drafter_says_use_strategy_eagle(head):
    """Catches issue 20 #5: a head given to --strategy draft failed on its (missing) tokenizer with a
    message cut mid-sentence; it is recognised before the tokenizer is read, as a usage error."""
    import specli

    with pytest.raises(UsageError) as info:
        specli.load(strategy="draft", draft=head, device="cpu")
    assert info.value.message.startswith(f"'{head}' is an EAGLE head: use --strategy eagle")
    assert "tokenizer" not in info.value.message and info.value.exit_code == 2


def test_an_eagle_head_given_as_target_says_how_to_use_it():
    import specli

    with pytest.raises(UsageError, match="'embedded:tiny-eagle3' is an EAGLE head, not a target model"):
        specli.load(target="embedded:tiny-eagle3", strategy="none", device="cpu")


def test_a_plain_model_is_not_taken_for_a_head(target):
    folder, _, _ = target
    refuse_head_as_model(folder, "t")  # no error


# ----------------------------------------------------------------------------- the target a head is for


def test_mismatch_names_the_target_a_head_was_trained_for_as_the_user_would():
    """Catches issue 20 #8: the hint named the folder of the machine the head was trained on
    ('/work/.../specli/embedded/tiny-target'), not 'embedded:tiny-target'."""
    import specli

    with pytest.raises(ModelLoadError) as info:
        specli.load(
            target="embedded:tiny-draft", draft="embedded:tiny-eagle3", strategy="eagle", device="cpu"
        )
    assert "this head was trained for 'embedded:tiny-target';" in info.value.hint
    assert "/" not in info.value.hint


@pytest.mark.parametrize(
    "written, shown",
    [
        ("/home/someone/src/specli/specli/embedded/tiny-target", "embedded:tiny-target"),
        (
            "/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/0e9e",
            "meta-llama/Llama-3.1-8B-Instruct",
        ),
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("/data/models/my-llama", "/data/models/my-llama"),  # a folder of the user's own: as written
        ("/data/embedded/not-shipped", "/data/embedded/not-shipped"),
    ],
)
def test_trained_for_names_read_as_the_user_types_them(tmp_path, target, written, shown):
    _, config_dict, model = target
    config = head_config(model.config.vocab_size, target_hidden_size=128)
    folder = write_config_only(tmp_path / "h", config_to_dict(config, written))
    with pytest.raises(ModelLoadError) as info:
        load_head(folder, config_dict, name="h")
    assert f"this head was trained for '{shown}';" in info.value.hint
