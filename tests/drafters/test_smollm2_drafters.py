"""SmolLM2-135M's own drafters, shipped in the package (issue 31): the draft model and the EAGLE-3 head
`specli train` made for SmolLM2-135M-Instruct, their presets, and their refusal of any other target.
None of these tests needs SmolLM2 itself (tests/models/test_real_models.py runs them on it); the export tests
read the target's GGUF header and skip without its package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

import specli
from specli import export as ex
from specli.errors import ModelLoadError, UsageError
from specli.models import packaged
from specli.models.model_dirs import embedded_dir
from specli.presets import resolve_preset

EMBEDDED = embedded_dir()
DRAFT, HEAD = "smollm2-135m-draft", "smollm2-135m-eagle3"
BUDGET = 80 * 2**20  # the ceiling for every embedded model together


def _weights(folder: Path) -> dict[str, str]:
    """Each tensor's dtype in the folder's safetensors files."""
    dtypes = {}
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), "pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                dtypes[name] = str(f.get_slice(name).get_dtype())
    return dtypes


def test_the_embedded_drafters_are_float16_and_fit_the_budget():
    """Catches a float32 export (twice the size), a head saved without its vocabulary maps, and the
    embedded folder growing past 80 MiB."""
    total = sum(p.stat().st_size for p in EMBEDDED.rglob("*") if p.is_file())
    assert total <= BUDGET, f"{total / 2**20:.1f} MiB embedded"
    for name in (DRAFT, HEAD):
        floats = {n: d for n, d in _weights(EMBEDDED / name).items() if d.startswith(("F", "BF"))}
        assert floats and set(floats.values()) == {"F16"}, (name, set(floats.values()))
    head = json.loads((EMBEDDED / HEAD / "config.json").read_text())
    assert head["speculators_model_type"] == "eagle3"
    assert head["speculators_config"]["verifier"]["name_or_path"] == "package:smollm2-135m"
    assert {"d2t", "t2d"} <= set(_weights(EMBEDDED / HEAD))
    draft = json.loads((EMBEDDED / DRAFT / "config.json").read_text())
    assert (draft["model_type"], draft["vocab_size"], draft["tie_word_embeddings"]) == ("llama", 49152, True)
    for name in (DRAFT, HEAD):
        assert (EMBEDDED / name / "training.json").is_file(), f"{name}: no record of its training"


def test_the_presets_pair_smollm2_with_its_drafters():
    draft = resolve_preset("smollm2-135m")
    # lookup by default (its fastest measured strategy: test_docs), the draft model on --strategy draft
    assert (draft.strategy, draft.target.model) == ("lookup", "package:smollm2-135m")
    assert draft.draft.model == f"embedded:{DRAFT}" and draft.eagle_head.model == f"embedded:{HEAD}"
    eagle = resolve_preset("smollm2-135m-eagle3")
    assert (eagle.strategy, eagle.target.model, eagle.draft.model) == (
        "eagle",
        "package:smollm2-135m",
        f"embedded:{HEAD}",
    )
    for preset in (draft, eagle):
        assert (preset.target.dtype, preset.generation.chat_template) == ("float32", "on")
        assert preset.speculation.num_draft_tokens == 4


def test_the_head_refuses_another_target_in_one_line():
    """The EAGLE-3 head reads SmolLM2's 576-wide hidden states: against the embedded tiny target (256
    wide) it stops before generating, naming the target it was trained for."""
    with pytest.raises(ModelLoadError) as info:
        specli.load(target="embedded:tiny-target", draft=f"embedded:{HEAD}", strategy="eagle", device="cpu")
    assert "\n" not in info.value.message and "hidden size" in info.value.message
    assert "this head was trained for 'package:smollm2-135m';" in (info.value.hint or "")


def test_the_draft_model_refuses_another_target_in_one_line():
    with pytest.raises(UsageError) as info:
        specli.load(target="embedded:tiny-target", draft=f"embedded:{DRAFT}", strategy="draft", device="cpu")
    assert "\n" not in info.value.message and "different tokenizers" in info.value.message


def _smollm2_or_skip() -> None:
    command = packaged.install_command(packaged.packaged_model("smollm2-135m"))
    if command is not None:
        pytest.skip(f"package:smollm2-135m is not installed: {command}")


@pytest.mark.parametrize(("preset", "name", "method"), [("smollm2-135m", DRAFT, "draft_model"),
                                                        ("smollm2-135m-eagle3", HEAD, "eagle3")])  # fmt: skip
def test_vllm_and_sglang_load_the_embedded_files(preset, name, method):
    _smollm2_or_skip()
    pair = ex.resolve_pair(preset, strategy="draft" if preset == "smollm2-135m" else None)
    vllm = ex.export("vllm", pair, ex.ServeOptions())
    config = json.loads(vllm.argv[vllm.argv.index("--speculative-config") + 1])
    assert (config["method"], config["model"], config["num_speculative_tokens"]) == (
        method,
        str(EMBEDDED / name),
        4,
    )
    assert vllm.argv[2] == str(packaged.packaged_gguf("smollm2-135m"))
    sglang = ex.export("sglang", pair, ex.ServeOptions())
    argv = list(sglang.argv)
    assert argv[argv.index("--speculative-draft-model-path") + 1] == str(EMBEDDED / name)
    algorithm = argv[argv.index("--speculative-algorithm") + 1]
    assert algorithm == ("STANDALONE" if method == "draft_model" else "EAGLE3")


def test_llama_cpp_converts_the_draft_model_and_the_head_with_a_target_folder():
    """The draft model converts as a folder; the head with --target-model-dir naming a folder of SmolLM2
    (config, tokenizer: what the converter reads), never the .gguf file itself."""
    _smollm2_or_skip()
    draft = ex.export("llama.cpp", ex.resolve_pair("smollm2-135m", strategy="draft"), ex.ServeOptions())
    convert = next(step for step in draft.steps if "convert_hf_to_gguf.py" in step)
    assert convert[2] == str(EMBEDDED / DRAFT)
    assert draft.argv[draft.argv.index("-md") + 1] == convert[convert.index("--outfile") + 1]
    head = ex.export("llama.cpp", ex.resolve_pair("smollm2-135m-eagle3"), ex.ServeOptions())
    convert = next(step for step in head.steps if "convert_hf_to_gguf.py" in step)
    assert convert[2] == str(EMBEDDED / HEAD)
    target_dir = Path(convert[convert.index("--target-model-dir") + 1])
    assert target_dir.is_dir() and (target_dir / "config.json").is_file()
    assert head.argv[head.argv.index("--spec-type") + 1] == "draft-eagle3"
