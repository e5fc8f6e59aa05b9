"""Placement over several GPUs, with fake sets of GPUs: the plan against transformers' own
device_map="auto" computation (on models built on the meta device), the preset models, and the wiring
in `specli.load` (which GPUs each model is loaded on)."""

from __future__ import annotations

import contextlib
import io
import logging
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from specli import api
from specli.errors import SpecliError
from specli.models import loading, memory
from specli.models.placement import fill, plan_placement

GB = 10**9


def _accelerate_map(model, max_memory: dict[int, int]) -> dict[str, object]:
    """What from_pretrained(device_map="auto", max_memory=...) computes (no GPUs needed)."""
    from transformers.integrations.accelerate import _get_device_map

    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)  # "Device 0 is not available": these GPUs are pretend
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return dict(_get_device_map(model, "auto", dict(max_memory), None))
    finally:
        logger.setLevel(level)


@pytest.mark.parametrize(
    "layers,vocab,tied", [(8, 4096, False), (32, 4096, False), (24, 16384, True), (16, 2048, False)]
)
def test_plans_agree_with_transformers_device_map(layers, vocab, tied):
    """Whenever a split is planned, transformers puts every module on the planned GPUs (nothing on CPU
    or disk) and the LM head on the drafter's GPU; every GPU keeps room for its share of the KV cache."""
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    target = memory.estimate(memory.Shape.from_config(config.to_dict()), 2, "none", 512)
    assert target.weights_bytes == sum(p.numel() * 2 for p in model.parameters())
    draft = memory.estimate(memory.Shape(vocab, 64, 2, 2, 1, 128, True), 2, "none", 512)
    per_weight = memory.WORKSPACE * (target.weights_bytes + target.kv_bytes) / target.weights_bytes
    rng = random.Random(layers)
    splits = 0
    for _ in range(60):
        free = [int(target.total_bytes * rng.uniform(0.15, 0.9)) for _ in range(rng.randint(2, 5))]
        plan = plan_placement(free, target, draft)
        if plan is None:
            continue
        for gpu, budget in plan.max_memory.items():
            assert budget * per_weight + (draft.total_bytes if gpu == plan.draft_gpu else 0) <= free[gpu] + 1
        if len(plan.target_gpus) > 1:  # the fewest GPUs that work
            assert plan_placement(free[: len(plan.target_gpus) - 1], target, draft) is None
        if not plan.split:
            continue
        splits += 1
        device_map = _accelerate_map(model, plan.max_memory)
        assert set(device_map.values()) <= set(plan.target_gpus), device_map
        assert device_map["lm_head"] == plan.draft_gpu
    assert splits >= 20  # the sweep really exercised splits


def test_one_gpu_that_fits_is_not_split():
    shape = memory.KNOWN_SHAPES["meta-llama/Llama-3.1-8B-Instruct"]
    target = memory.estimate(shape, 2, "none", 4096)
    draft = memory.estimate(memory.KNOWN_SHAPES["meta-llama/Llama-3.2-1B-Instruct"], 2, "none", 4096)
    plan = plan_placement([80 * GB, 80 * GB], target, draft)
    assert plan is not None and plan.target_gpus == (0,) and plan.draft_gpu == 0 and not plan.split


def test_llama_70b_in_bfloat16_spreads_over_two_80gb_gpus_and_not_one():
    target = memory.estimate(memory.KNOWN_SHAPES["meta-llama/Llama-3.1-70B-Instruct"], 2, "none", 4096)
    draft = memory.estimate(memory.KNOWN_SHAPES["meta-llama/Llama-3.2-1B-Instruct"], 2, "none", 4096)
    assert plan_placement([79 * GB], target, draft) is None
    plan = plan_placement([79 * GB] * 4, target, draft)
    assert plan is not None and plan.split
    assert plan.draft_gpu == plan.target_gpus[-1]  # untied LM head: on the last GPU, beside the drafter
    assert sum(plan.max_memory.values()) >= target.weights_bytes


def test_llama_70b_4bit_on_24gb_cards():
    """About 48 GB with the drafter: not on two 23 GB cards; on four, split with the drafter beside the
    LM head; on one 80 GB card, whole."""
    target = memory.estimate(memory.KNOWN_SHAPES["meta-llama/Llama-3.1-70B-Instruct"], 2, "4bit", 4096)
    draft = memory.estimate(memory.KNOWN_SHAPES["meta-llama/Llama-3.2-1B-Instruct"], 2, "none", 4096)
    assert plan_placement([23 * GB] * 2, target, draft, quantized=True) is None
    plan = plan_placement([23 * GB] * 4, target, draft, quantized=True)
    assert plan is not None and plan.split and plan.draft_gpu == plan.target_gpus[-1]
    # transformers takes 10% off each entry for bitsandbytes: the map passed is scaled up to match.
    unscaled = plan_placement([23 * GB] * 4, target, draft, quantized=False)
    assert unscaled is not None and plan.max_memory[0] > unscaled.max_memory[0]
    whole = plan_placement([80 * GB], target, draft, quantized=True)
    assert whole is not None and not whole.split


def test_no_plan_when_the_gpus_are_too_small():
    target = memory.estimate(memory.KNOWN_SHAPES["meta-llama/Llama-3.1-70B-Instruct"], 2, "none", 4096)
    assert plan_placement([24 * GB] * 4, target) is None
    assert plan_placement([], target) is None


def test_fill_places_modules_whole_and_in_order():
    assert fill([4, 4, 4], [8, 8]) == [0, 1, 1]  # GPU 0 keeps room for the largest module to come
    assert fill([1, 2, 2], [10, 10]) == [0, 0, 0]
    assert fill([5, 5], [4, 4]) is None


def _fake_gpus(monkeypatch, free: list[int]) -> list[dict]:
    """Pretend this machine has GPUs with `free` bytes; record every load_model call instead of loading
    onto them (the real tiny models are loaded on CPU)."""
    calls: list[dict] = []
    real_load = loading.load_model
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(free))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(memory, "free_bytes", lambda device: free[device.index or 0])

    def record(folder, **kwargs):
        calls.append(kwargs)
        return real_load(folder, **{**kwargs, "device": torch.device("cpu"), "max_memory": None})

    monkeypatch.setattr(loading, "load_model", record)
    return calls


def _tiny_needs() -> tuple[memory.Estimate, memory.Estimate]:
    folder = loading.embedded_model("tiny-target")
    target = memory.estimate(memory.Shape.from_config(loading.read_config(folder)), 2, "none", 512)
    folder = loading.embedded_model("tiny-draft")
    draft = memory.estimate(memory.Shape.from_config(loading.read_config(folder)), 2, "none", 512)
    return target, draft


def test_load_splits_the_target_and_puts_the_drafter_beside_its_head(monkeypatch):
    target, draft = _tiny_needs()
    free = [int(target.total_bytes * 0.7)] * 3
    calls = _fake_gpus(monkeypatch, free)
    pair = api.load("tiny", dtype="bfloat16")
    plan = plan_placement(free, target, draft)
    assert plan is not None and plan.split
    assert pair.placement == plan
    assert calls[0]["max_memory"] == plan.max_memory  # the target: device_map="auto" under the plan
    assert calls[1]["device"] == torch.device("cuda", plan.draft_gpu)
    assert calls[1].get("max_memory") is None  # the drafter: whole on one GPU
    assert pair.generate("def f(x):", max_new_tokens=8).token_ids  # the models themselves still work


def test_load_keeps_a_pair_that_fits_on_the_first_gpu(monkeypatch):
    calls = _fake_gpus(monkeypatch, [100 * GB, 100 * GB])
    pair = api.load("tiny", dtype="bfloat16")
    assert pair.placement is None
    assert [c.get("max_memory") for c in calls] == [None, None]
    assert calls[0]["device"] == calls[1]["device"] == torch.device("cuda")


def test_load_says_when_the_pair_fits_no_set_of_gpus(monkeypatch):
    target, _ = _tiny_needs()
    calls = _fake_gpus(monkeypatch, [int(target.total_bytes * 0.2)] * 2)
    with pytest.raises(SpecliError) as err:
        api.load("tiny", dtype="bfloat16")
    assert "the 2 GPUs have cuda:0" in str(err.value) and "--quant 4bit" in str(err.value.hint)
    assert calls == []  # nothing loaded
