"""The memory planner: estimates from configs against real checkpoint sizes (facts) and against tiny
models whose size is known, the fit check and its message, and the planner in `presets list/show`."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
from conftest import make_model, save_model
from typer.testing import CliRunner

import specli
from specli.cli import app
from specli.errors import SpecliError
from specli.models import memory
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
    needs = [memory.Need("big", "bfloat16", "none", memory.estimate(shape, 2), shape=shape)]
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


# --------------------------------------------------------------------------- parallel drafters, MoE, P-EAGLE

NEW_PRESETS = ("llama-8b-pard", "qwen2.5-7b-pard", "gpt-oss-20b-peagle")


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_parallel_presets_are_planned_from_known_shapes(name):
    """Catches a preset whose models are not in KNOWN_SHAPES (its estimate would come from nowhere)."""
    from specli.presets import resolve_preset

    preset = resolve_preset(name)
    assert preset.target.model in memory.KNOWN_SHAPES
    if preset.strategy == "eagle":
        assert preset.draft.model in memory.KNOWN_HEADS
    else:
        assert preset.draft.model in memory.KNOWN_SHAPES
    assert memory.preset_estimate(preset) is not None


@pytest.mark.parametrize(
    ("pard", "base"),
    [
        ("amd/PARD-Llama-3.2-1B", "meta-llama/Llama-3.2-1B-Instruct"),
        ("amd/PARD-Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B-Instruct"),
    ],
)
def test_pard_drafters_have_their_base_models_shape(pard, base):
    assert memory.KNOWN_SHAPES[pard] == memory.KNOWN_SHAPES[base]


def test_pard_presets_cost_what_their_autoregressive_twins_do():
    """Same shapes, same dtypes: a PARD preset plans exactly the memory of the preset it parallelizes."""
    from specli.presets import resolve_preset

    for pard, twin in (("llama-8b-pard", "llama-8b-1b"), ("qwen2.5-7b-pard", "qwen2.5-7b-0.5b")):
        assert memory.preset_estimate(resolve_preset(pard)) == memory.preset_estimate(resolve_preset(twin))


# openai/gpt-oss-20b's config.json (the numbers the shape needs; quantization_config omitted)
GPT_OSS_20B_CONFIG = {
    "model_type": "gpt_oss",
    "vocab_size": 201088,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_hidden_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "attention_bias": True,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}


def test_moe_weights_count_every_expert():
    """gpt-oss-20b: about 21B parameters (OpenAI's figure; 3.6B active), so about 42 GB in bfloat16,
    where a dense reading of its config (one MLP of intermediate_size 2880) would say under 5 GB."""
    shape = memory.KNOWN_SHAPES["openai/gpt-oss-20b"]
    assert 20.5e9 < shape.parameters() < 21.5e9
    weights = memory.estimate(shape, dtype_bytes=2).weights_bytes
    assert abs(weights - 2 * 21e9) <= 0.05 * 2 * 21e9
    dense = dataclasses.replace(shape, experts=0)
    assert memory.estimate(dense, 2).weights_bytes < 5e9
    # bitsandbytes replaces nn.Linear modules only: the experts (3-D parameters) stay 16-bit under --quant
    four = memory.estimate(shape, 2, "4bit").weights_bytes
    assert shape.expert_parameters() * 2 < four < weights


def test_moe_shape_from_config_matches_the_known_one():
    """The planner at load time reads the checkpoint's config: it must find the experts and the sliding
    layers there too (the known shape declares no context, the config 131072: same 4096-token plan)."""
    from_config = memory.Shape.from_config(GPT_OSS_20B_CONFIG)
    known = memory.KNOWN_SHAPES["openai/gpt-oss-20b"]
    assert (from_config.experts, from_config.sliding_layers, from_config.sliding_window) == (32, 12, 128)
    assert from_config.parameters() == known.parameters()
    assert from_config.kv_bytes(from_config.context(4096)) == known.kv_bytes(4096)


def test_sliding_layers_hold_their_window_of_kv():
    """gpt-oss-20b: 12 full layers hold 4096 tokens, 12 sliding ones 128 (2 x 8 kv heads x 64 x 2 bytes)."""
    shape = memory.KNOWN_SHAPES["openai/gpt-oss-20b"]
    per_token_layer = 2 * 8 * 64 * 2
    assert shape.kv_bytes(4096, 2) == per_token_layer * (12 * 4096 + 12 * 128)
    assert shape.kv_bytes(100, 2) == per_token_layer * 24 * 100  # under the window: every layer alike
    all_full = memory.Shape.from_config({**GPT_OSS_20B_CONFIG, "layer_types": ["full_attention"] * 24})
    assert all_full.sliding_layers == 0 and all_full.kv_bytes(4096, 2) == per_token_layer * 24 * 4096


def test_dense_configs_read_no_experts():
    for config in ({"num_experts": 1}, {"num_local_experts": None}, {}):
        shape = memory.Shape.from_config({**_config_of("tiny-target"), **config})
        assert shape.experts == 0


def test_parameter_count_of_tiny_moe_models():
    """Mixtral exactly; gpt-oss within 2% (its expert biases, o_proj bias and attention sinks are not
    counted: 0.03% of the real model)."""
    mixtral = make_model("mixtral", layers=3, hidden=64, num_local_experts=4)
    assert memory.Shape.from_config(mixtral.config).parameters() == sum(
        p.numel() for p in mixtral.parameters()
    )
    gpt_oss = make_model(
        "gpt_oss", layers=3, hidden=64, num_local_experts=4, num_experts_per_tok=2, head_dim=16
    )
    real = sum(p.numel() for p in gpt_oss.parameters())
    assert abs(memory.Shape.from_config(gpt_oss.config).parameters() - real) <= 0.02 * real


def test_the_p_eagle_head_is_planned_with_its_four_layers():
    """amazon/GPT-OSS-20B-P-EAGLE: about 3.6 GB in bfloat16 (1.8B parameters: 4 layers, own embeddings, a
    full-vocabulary LM head), where the one-layer default would plan about half; KV for 4 layers."""
    target = memory.KNOWN_SHAPES["openai/gpt-oss-20b"]
    head = memory.head_estimate(target, 2, 4096, memory.KNOWN_HEADS["amazon/GPT-OSS-20B-P-EAGLE"])
    assert abs(head.weights_bytes - 3.6e9) <= 0.05 * 3.6e9
    one_layer = memory.head_estimate(target, 2, 4096)
    assert one_layer.weights_bytes < 0.6 * head.weights_bytes
    assert head.kv_bytes == 4 * one_layer.kv_bytes == 4 * 2 * 8 * 64 * 4096 * 2


def test_head_shapes_default_to_the_one_layer_head():
    """The default HeadShape is the one-layer head every other eagle preset was planned with; each more
    layer adds one plain decoder layer (q/k/v read d, not 2d) and its two norms."""
    target = memory.KNOWN_SHAPES["meta-llama/Llama-3.1-8B-Instruct"]
    assert memory.head_estimate(target, 2, 4096) == memory.head_estimate(target, 2, 4096, memory.HeadShape())
    d, q, kv, i = 4096, 4096, 1024, 14336
    plain = d * (q + 2 * kv) + q * d + 3 * d * i + 2 * d
    two = memory.head_estimate(target, 2, 4096, memory.HeadShape(layers=2))
    assert two.weights_bytes - memory.head_estimate(target, 2, 4096).weights_bytes == 2 * plain


def test_presets_list_shows_the_parallel_presets():
    data = {p["name"]: p for p in json.loads(CliRunner().invoke(app, ["presets", "list", "--json"]).stdout)}
    assert set(NEW_PRESETS) <= set(data)
    assert 48e9 < data["gpt-oss-20b-peagle"]["estimated_memory_bytes"] < 53e9  # bf16 target + 4-layer head
    shown = CliRunner().invoke(app, ["presets", "show", "gpt-oss-20b-peagle"]).stdout
    assert "estimated memory: 50.1 GB" in shown
    listed = CliRunner().invoke(app, ["presets", "list"], env={"COLUMNS": "200"}).stdout
    assert all(name in listed for name in NEW_PRESETS)


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
    from specli.models.model_dirs import embedded_dir, read_config

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

    from specli.models import plan
    from specli.models.model_dirs import embedded_dir

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


# --------------------------------------------------------------------------- advice when a pair does not fit
# Issue 20 #4: "Try --quant 4bit" for a pair that needs 44.9 GB at 4-bit, and "Try ." with --quant 4bit.

LLAMA_70B = dict(
    vocab_size=128256,
    hidden_size=8192,
    num_hidden_layers=80,
    num_attention_heads=64,
    num_key_value_heads=8,
    intermediate_size=28672,
)
LLAMA_8B = dict(
    vocab_size=128256,
    hidden_size=4096,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    intermediate_size=14336,
)
LLAMA_1B = dict(
    vocab_size=128256,
    hidden_size=2048,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    intermediate_size=8192,
    tie_word_embeddings=True,
)
OPTION = re.compile(r"(?:Options that fit: |; )(.+?) needs about ([\d.]+) GB")


def _config_folder(path, dims: dict, tokenizer_from: str | None = None):
    """A folder holding only a Llama config.json (no weights), and a tokenizer when the CLI is to read it."""
    from specli.models.model_dirs import embedded_dir

    path.mkdir(parents=True)
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
        **dims,
    }
    (path / "config.json").write_text(json.dumps(config))
    if tokenizer_from:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(embedded_dir() / tokenizer_from / name, path / name)
    return path


def _hint(needs, device, available: float, also=()) -> str:
    with pytest.raises(SpecliError) as info:
        memory.check_fits(needs, device, int(available), also)
    return info.value.hint


def _apply(advice: str, models, device):
    """What the pair needs with the flags of one piece of advice, estimated as load would estimate it."""
    from specli.models import plan

    quant = re.search(r"--quant (\w+)", advice)
    changed = [
        dataclasses.replace(
            model,
            dtype="bfloat16" if "--dtype bfloat16" in advice else model.dtype,
            quant=(quant.group(1) if quant else model.quant) if i == 0 else model.quant,
        )
        for i, model in enumerate(models[:1] if "no drafter" in advice else models)
    ]
    return memory.total_bytes(plan.estimate_needs(changed, device, trust_remote_code=False))


@pytest.mark.parametrize("free_gb", [8, 12, 24, 40])
def test_every_option_offered_fits_when_its_flags_are_used(tmp_path, free_gb):
    """Catches advice that does not fit (issue 20 #4): each option, applied as flags through the load-time
    estimate, fits the free memory and needs what the hint says; the pair itself does not fit."""
    import torch

    from specli.models import plan

    cpu = torch.device("cpu")
    models = [
        plan.ModelToLoad("8b", folder=_config_folder(tmp_path / "8b", LLAMA_8B)),
        plan.ModelToLoad("1b", folder=_config_folder(tmp_path / "1b", LLAMA_1B)),
    ]
    needs = plan.estimate_needs(models, cpu, trust_remote_code=False)
    assert [n.dtype for n in needs] == ["float32", "float32"]
    hint = _hint(needs, cpu, free_gb * 1e9)
    offered = OPTION.findall(hint)
    assert offered, hint
    for advice, shown in offered:
        total = _apply(advice, models, cpu)
        assert total <= free_gb * 1e9, (advice, total)
        assert memory.human(total) == f"{shown} GB"
    advices = [advice for advice, _ in offered]
    assert not any("--quant 4bit" in a and a.replace("4bit", "8bit") in advices for a in advices), hint


def test_no_quant_advice_that_does_not_fit_and_no_empty_advice(tmp_path, monkeypatch):
    """The issue's two messages, through the CLI on a 70B config with no weights: not 'Try --quant 4bit'
    when 4-bit does not fit either, not 'Try .' with --quant 4bit; instead that nothing fits, and the
    smallest estimate."""
    folder = _config_folder(tmp_path / "70b", LLAMA_70B, tokenizer_from="tiny-target")
    monkeypatch.setattr(memory, "free_bytes", lambda device: 24_600_000_000)
    args = ["generate", "hi", "--target", str(folder), "--device", "cpu"]
    for extra, smallest in (([], "--dtype bfloat16 --quant 4bit"), (["--quant", "4bit"], "--dtype bfloat16")):
        result = CliRunner().invoke(app, args + extra)
        assert result.exit_code == 1, result.output
        assert "Try" not in result.stderr and "--quant 4bit." not in result.stderr
        assert f"Nothing fits: the smallest, {smallest}, needs about 44.9 GB." in result.stderr, result.stderr
    monkeypatch.setattr(memory, "free_bytes", lambda device: 46_000_000_000)
    result = CliRunner().invoke(app, args + ["--quant", "4bit"])
    assert "Options that fit: --dtype bfloat16 needs about 44.9 GB." in result.stderr, result.stderr


def test_a_shorter_context_is_offered_when_only_the_kv_cache_does_not_fit():
    """The longest context offered fits, one token more does not; none is offered when the weights
    alone do not fit."""
    import torch

    shape = memory.KNOWN_SHAPES["meta-llama/Llama-3.1-8B-Instruct"]
    needs = [memory.Need("8b", "bfloat16", "none", memory.estimate(shape, 2), shape=shape)]
    available = 17.9e9
    hint = _hint(needs, torch.device("cuda", 0), available)
    tokens = int(re.search(r"at most (\d+) tokens of prompt \+ output", hint).group(1))
    assert memory.estimate(shape, 2, "none", tokens).total_bytes <= available
    assert memory.estimate(shape, 2, "none", tokens + 1).total_bytes > available
    assert "at most" not in _hint(needs, torch.device("cuda", 0), 17e9)  # the weights alone need 17.7 GB


def test_nothing_smaller_says_so():
    import torch

    shape = memory.KNOWN_SHAPES["meta-llama/Llama-3.1-8B-Instruct"]
    needs = [memory.Need("8b", "bfloat16", "4bit", memory.estimate(shape, 2, "4bit"), shape=shape)]
    hint = _hint(needs, torch.device("cpu"), 1e9)
    assert hint.startswith("Nothing fits, and no flag makes it smaller")


def test_a_gpu_pair_is_offered_the_system_memory_only_when_it_fits_there(tmp_path, monkeypatch):
    """Another device is advised with its estimate and cost, and only where the pair fits."""
    import torch

    from specli.models import plan

    models = [plan.ModelToLoad("8b", dtype="bfloat16", folder=_config_folder(tmp_path / "8b", LLAMA_8B))]
    gpu = torch.device("cuda", 0)
    for cpu_free, offered in ((40e9, True), (10e9, False)):
        monkeypatch.setattr(memory, "free_bytes", lambda d, c=cpu_free: 8e9 if d.type == "cuda" else c)
        with pytest.raises(SpecliError) as info:
            plan.plan_pair(models, gpu, "cuda:0", trust_remote_code=False)
        assert (
            "--device cpu (system memory; many times slower than a GPU) needs about 18.3 GB"
            in info.value.hint
        ) == offered
        assert "--quant 4bit needs about" in info.value.hint  # 6.8 GB fits the 8 GB GPU


def test_split_over_gpus_offers_only_what_the_placement_holds(tmp_path, monkeypatch):
    """With several GPUs under --device auto the options are checked by the placement itself."""
    import torch

    from specli.models import plan
    from specli.models.placement import plan_placement

    models = [plan.ModelToLoad("8b", dtype="bfloat16", folder=_config_folder(tmp_path / "8b", LLAMA_8B))]
    free = [7e9, 7e9]
    monkeypatch.setattr(plan, "gpu_count", lambda spec: 2)
    monkeypatch.setattr(memory, "free_bytes", lambda d: int(free[d.index]) if d.type == "cuda" else 1e9)
    with pytest.raises(SpecliError) as info:
        plan.plan_pair(models, torch.device("cuda", 0), "auto", trust_remote_code=False)
    offered = OPTION.findall(info.value.hint)
    assert offered and "--device cpu" not in info.value.hint, info.value.hint
    for advice, _ in offered:
        quant = re.search(r"--quant (\w+)", advice).group(1)
        changed = plan.estimate_needs(
            [dataclasses.replace(models[0], quant=quant)], torch.device("cpu"), False
        )
        assert plan_placement([int(f) for f in free], changed[0].estimate, quantized=True) is not None
