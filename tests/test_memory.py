"""The memory planner: estimates from configs against real checkpoint sizes (facts) and against tiny
models whose size is known, the fit check and its message, and the planner in `presets list/show`."""

from __future__ import annotations

import json

import pytest
from conftest import make_model, save_model
from typer.testing import CliRunner

import specli
from specli import memory
from specli.cli import app
from specli.errors import SpecliError
from specli.presets import available_presets, load_preset_file

# Total safetensors bytes of the bfloat16 checkpoints on the Hugging Face Hub (facts, 2026-11).
CHECKPOINT_BYTES = {
    "meta-llama/Llama-3.1-8B-Instruct": 16_060_522_496,
    "meta-llama/Llama-3.1-70B-Instruct": 141_107_412_992,
    "meta-llama/Llama-3.2-1B-Instruct": 2_471_645_608,
    "Qwen/Qwen2.5-7B-Instruct": 15_231_233_024,
    "Qwen/Qwen2.5-32B-Instruct": 65_527_752_704,
    "Qwen/Qwen2.5-0.5B-Instruct": 988_097_824,
}


@pytest.mark.parametrize("model", list(CHECKPOINT_BYTES))
def test_estimates_match_real_checkpoints_within_ten_percent(model):
    weights = memory.estimate(memory.KNOWN_SHAPES[model], dtype_bytes=2).weights_bytes
    assert abs(weights - CHECKPOINT_BYTES[model]) <= 0.10 * CHECKPOINT_BYTES[model]


@pytest.mark.parametrize(
    "arch,overrides",
    [
        ("llama", {}),
        ("llama", {"tie_word_embeddings": True}),
        ("qwen2", {}),
        ("mistral", {"head_dim": 32}),
    ],
)
def test_parameter_count_of_tiny_models_is_exact(arch, overrides):
    model = make_model(arch, layers=3, hidden=64, **overrides)
    shape = memory.Shape.from_config(model.config)
    assert shape.parameters() == sum(p.numel() for p in model.parameters())


def test_quantization_shrinks_the_layers_only():
    shape = memory.KNOWN_SHAPES["meta-llama/Llama-3.1-70B-Instruct"]
    full = memory.estimate(shape, 2).weights_bytes
    eight = memory.estimate(shape, 2, "8bit").weights_bytes
    four = memory.estimate(shape, 2, "4bit").weights_bytes
    assert four < eight < full
    assert four > shape.other_parameters() * 2  # embeddings and head stay 16-bit
    assert 35e9 < four < 45e9  # the "about 40 GB" of the preset's notes


def test_kv_cache_size():
    shape = memory.KNOWN_SHAPES["meta-llama/Llama-3.1-8B-Instruct"]
    # 2 (k, v) x 32 layers x 8 kv heads x 128 dims x 2 bytes = 128 KiB per token
    assert shape.kv_bytes(1, 2) == 131072


def test_fit_check_names_the_figures_and_the_options():
    shape = memory.KNOWN_SHAPES["meta-llama/Llama-3.1-8B-Instruct"]
    needs = [memory.Need("big", "bfloat16", "none", memory.estimate(shape, 2))]
    import torch

    with pytest.raises(SpecliError) as info:
        memory.check_fits(needs, torch.device("cuda", 0), 8 * 10**9)
    assert "8.0 GB free" in info.value.message and "--quant 4bit" in info.value.hint
    memory.check_fits(needs, torch.device("cuda", 0), 40 * 10**9)  # fits: no error
    memory.check_fits(needs, torch.device("cuda", 0), None)  # unknown: no check


def test_every_shipped_preset_has_an_estimate():
    for name, path in available_presets().items():
        assert memory.preset_estimate(load_preset_file(path)) is not None, name


def test_presets_list_json_and_show_carry_the_estimate():
    data = json.loads(CliRunner().invoke(app, ["presets", "list", "--json"]).stdout)
    assert all(p["estimated_memory_bytes"] for p in data)
    shown = CliRunner().invoke(app, ["presets", "show", "llama-70b-1b"]).stdout
    assert "estimated memory: 47.8 GB" in shown


def test_load_stops_before_weights_when_the_pair_does_not_fit(tiny_pair, monkeypatch):
    target, draft = tiny_pair
    monkeypatch.setattr(memory, "free_bytes", lambda device: 1000)
    result = CliRunner().invoke(app, ["generate", "hi", "--target", str(target), "--draft", str(draft)])
    assert result.exit_code == 1
    assert "not enough memory" in result.stderr and "1 kB free" in result.stderr
    monkeypatch.setenv("SPECLI_NO_MEMORY_CHECK", "1")
    result = CliRunner().invoke(
        app, ["generate", "hi", "--target", str(target), "--draft", str(draft), "--max-new-tokens", "3"]
    )
    assert result.exit_code == 0, result.output


def test_shape_from_a_saved_folder(tmp_path, tokenizer):
    model = make_model("llama", len(tokenizer), layers=2, hidden=64)
    folder = save_model(tmp_path / "m", model, tokenizer)
    assert memory.shape_of(str(folder)).parameters() == sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------- the model's own context


def _tiny_shapes() -> list[memory.Shape]:
    return [memory.shape_of(f"embedded:{name}") for name in ("tiny-target", "tiny-draft")]


def test_shape_reads_the_context_and_caps_the_kv_cache_with_it():
    """Catches a Shape that ignores max_position_embeddings, so a 512-token model plans 4096 tokens of KV."""
    shape = memory.Shape.from_config({**_config_of("tiny-target"), "max_position_embeddings": 512})
    assert shape.max_positions == 512
    assert shape.context(4096) == 512 and shape.context(100) == 100
    assert memory.KNOWN_SHAPES["meta-llama/Llama-3.1-8B-Instruct"].context(4096) == 4096  # none declared
    assert memory.Shape.from_config({**_config_of("tiny-target"), "n_positions": 1024}).max_positions == 512
    gpt2 = memory.Shape.from_config(make_model("gpt2", layers=1, hidden=64, max_positions=300).config)
    assert gpt2.max_positions == 300


def _config_of(name: str) -> dict:
    from specli.model_dirs import embedded_dir, read_config

    return read_config(embedded_dir() / name)


def test_tiny_preset_estimate_uses_its_512_token_context():
    """Catches issue 13 #17: the tiny preset's estimate assumed a 4,096-token KV cache for 512-token models
    (presets list/show)."""
    from specli.presets import resolve_preset

    tiny = resolve_preset("tiny")
    shapes = _tiny_shapes()
    assert [s.max_positions for s in shapes] == [512, 512]
    assert memory.preset_context(tiny, memory.PLAN_CONTEXT) == 512
    at_512 = sum(memory.estimate(s, 4, "none", 512).total_bytes for s in shapes)  # embedded: float32
    at_4096 = sum(memory.estimate(s, 4, "none", 4096).total_bytes for s in shapes)
    assert memory.preset_estimate(tiny, memory.PLAN_CONTEXT) == at_512 < at_4096
    data = json.loads(CliRunner().invoke(app, ["presets", "list", "--json"]).stdout)
    assert {p["name"]: p["estimated_memory_bytes"] for p in data}["tiny"] == at_512


def test_long_context_models_still_plan_4096_tokens():
    """Catches the cap biting where it should not: a model with a long context keeps the planned 4096."""
    from specli.presets import resolve_preset

    preset = resolve_preset("llama-70b-1b")
    assert memory.preset_context(preset, memory.PLAN_CONTEXT) == memory.PLAN_CONTEXT


def test_load_time_fit_check_uses_the_models_context(monkeypatch):
    """Catches issue 13 #17 at load time: the fit check planned (and said) 4096 tokens of KV cache for the
    512-token tiny pair."""
    import torch

    from specli import plan
    from specli.model_dirs import embedded_dir

    models = [plan.ModelToLoad(n, folder=embedded_dir() / n) for n in ("tiny-target", "tiny-draft")]
    needs = plan.estimate_needs(models, torch.device("cpu"), trust_remote_code=False)
    assert [n.context for n in needs] == [512, 512]
    assert [n.estimate.kv_bytes for n in needs] == [s.kv_bytes(512, 4) for s in _tiny_shapes()]
    monkeypatch.setattr(memory, "free_bytes", lambda device: 1000)
    result = CliRunner().invoke(app, ["generate", "def f", "--preset", "tiny", "--device", "cpu"])
    assert result.exit_code == 1
    assert "KV cache for 512 tokens" in result.stderr and "4096" not in result.stderr


def test_the_fit_check_counts_an_eagle_head(monkeypatch):
    """Between what the target alone needs and what target + head need: refused, naming the head."""
    monkeypatch.setattr(memory, "free_bytes", lambda device: 48_000_000)
    specli.load(strategy="none", device="cpu")  # the target alone fits
    with pytest.raises(SpecliError, match=r"embedded:tiny-eagle3 6\.9 MB \(float32\)"):
        specli.load(strategy="eagle", device="cpu")
