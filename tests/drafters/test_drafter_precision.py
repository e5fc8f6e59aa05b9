"""A drafter's precision changes acceptance, never the output (issue 40 #7), on the embedded pair: its
draft model and EAGLE-3 head are stored in bfloat16 and load at the run's dtype (float32 on CPU, so their
speed is that of float32 weights); with them, with float32 copies whose weights are not bfloat16 values
(as a float32 master before rounding would be), and with them run in bfloat16 beside the float32 target,
greedy output is the target's own generate(). Acceptance may differ between the three."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import specli
from specli.bench.prompts import set_path
from specli.models.model_dirs import embedded_model
from specli.presets import ModelSpec, Preset

DRAFTERS = {"draft": "tiny-draft", "eagle": "tiny-eagle3"}
TOKENS = 40


def float32_copy(name: str, folder: Path, seed: int = 0) -> Path:
    """The embedded drafter as float32 safetensors, each weight moved by up to half a bfloat16 step (so
    no weight is the stored bfloat16 value any more), its config naming float32."""
    shutil.copytree(embedded_model(name), folder)
    weights = folder / "model.safetensors"
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for key, tensor in load_file(str(weights)).items():
        if tensor.is_floating_point():
            assert tensor.dtype == torch.bfloat16, (name, key, tensor.dtype)
            tensor = tensor.float()
            tensor = tensor * (1 + (torch.rand(tensor.shape, generator=generator) - 0.5) * 2**-8)
        state[key] = tensor.contiguous()
    save_file(state, str(weights), metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["dtype" if "dtype" in config else "torch_dtype"] = "float32"
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder


def pair_with(draft: str, head: str, dtype: str = "auto"):
    """The embedded target (float32) with this draft model and EAGLE head, both in `dtype`."""
    preset = Preset(
        name="precision",
        strategy="draft",
        target=ModelSpec(model="embedded:tiny-target", dtype="float32"),
        draft=ModelSpec(model=draft, dtype=dtype),
        head=ModelSpec(model=head, dtype=dtype),
    )
    return specli.load(preset, strategy=list(DRAFTERS), device="cpu", threads=1)


def prompts() -> list[str]:
    lines = set_path("code").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["turns"][0] for line in lines[:3]]


def reference(pair, ids: list[int]) -> list[int]:
    """The target's greedy generate(), up to its first end-of-sequence token (specli stops there)."""
    out = pair.target_model.generate(torch.tensor([ids]), max_new_tokens=TOKENS, do_sample=False)
    new = out[0, len(ids) :].tolist()
    cut = next((i + 1 for i, t in enumerate(new) if t in pair.eos_ids), len(new))
    return new[:cut]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("precision")
    copies = {strategy: float32_copy(name, root / name) for strategy, name in DRAFTERS.items()}
    return {
        "stored bfloat16, run float32": pair_with("embedded:tiny-draft", "embedded:tiny-eagle3"),
        "float32 copy": pair_with(str(copies["draft"]), str(copies["eagle"])),
        "run in bfloat16": pair_with("embedded:tiny-draft", "embedded:tiny-eagle3", dtype="bfloat16"),
    }


def test_the_shipped_drafters_are_stored_in_bfloat16_and_run_in_float32(pairs):
    """Bug caught: a loader that keeps the stored bfloat16 on CPU (the drafter's speed would change) or a
    draft model / head that no longer reads back at the run's dtype."""
    for name in DRAFTERS.values():
        dtypes = {t.dtype for t in load_file(str(embedded_model(name) / "model.safetensors")).values()}
        assert torch.bfloat16 in dtypes and torch.float16 not in dtypes and torch.float32 not in dtypes
    pair = pairs["stored bfloat16, run float32"]
    assert {p.dtype for p in pair.draft_model.parameters()} == {torch.float32}
    assert {p.dtype for p in pair.head.parameters()} == {torch.float32}
    assert {p.dtype for p in pairs["run in bfloat16"].draft_model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in pairs["run in bfloat16"].head.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize("strategy", list(DRAFTERS))
def test_a_drafters_precision_changes_acceptance_never_the_output(pairs, strategy):
    """Greedy output with the drafter stored in bfloat16, with a float32 copy that is not bfloat16-exact,
    and with the drafter computing in bfloat16: each the target's own generate(), token for token (and
    drafts were kept in each: the drafters draft). The three drafters do differ: their logits on the
    same input are not equal."""
    accepted = {}
    for label, pair in pairs.items():
        accepted[label] = 0
        for prompt in prompts():
            ids = pair.encode(prompt, chat=False)
            result = pair.generate(prompt_ids=ids, strategy=strategy, max_new_tokens=TOKENS)
            assert result.token_ids == reference(pair, ids), (label, strategy)
            accepted[label] += result.stats.accepted
        assert accepted[label] > 0, (label, strategy)
    if strategy == "draft":
        ids = torch.tensor([pairs["float32 copy"].encode(prompts()[0], chat=False)])
        with torch.no_grad():
            logits = [pair.draft_model(ids).logits[0, -1].float() for pair in pairs.values()]
        assert not torch.equal(logits[0], logits[1]) and not torch.equal(logits[0], logits[2])
    else:
        weights = [pair.head.fc.weight.float() for pair in pairs.values()]
        assert not torch.equal(weights[0], weights[1]) and torch.equal(weights[0], weights[2])
