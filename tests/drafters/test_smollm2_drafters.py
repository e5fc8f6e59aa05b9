"""SmolLM2-135M's own drafters (issue 31, issue 40 #7): the draft model and the EAGLE-3 head `specli
train` makes for SmolLM2-135M-Instruct are not shipped (trained for an hour on a CPU they ran slower than
plain decoding), so the presets name them as `trained:NAME`, the folder the recipe
(scripts/smollm2_train.sh, docs/training.md#recipes) writes in specli's cache. Without them the presets
say which `specli train` command writes them, in one or two lines; with them (test-made drafters of
SmolLM2's shapes here, laid out where the recipe writes) they load, refuse any other target, and export.
None of these tests needs SmolLM2's weights (tests/models/test_real_models.py runs drafters on it); the
ones that need its tokenizer or GGUF header skip without its package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import make_model
from transformers import AutoConfig, AutoTokenizer
from typer.testing import CliRunner

import specli
from specli import export as ex
from specli.cli import app
from specli.errors import ModelLoadError, ModelNotFoundError, UsageError
from specli.models import loading, memory, model_dirs, packaged, sources
from specli.models.eagle_head import EagleHead, init_weights
from specli.models.head_formats import save_head
from specli.presets import resolve_preset
from specli.readiness import absent_drafters, free_memory, readiness
from specli.training.eagle import head_config_for, set_vocabulary
from specli.training.jobs import save_causal_lm

DRAFT, HEAD, HEADS = "smollm2-135m-draft", "smollm2-135m-eagle3", "smollm2-135m-heads"
TARGET = "package:smollm2-135m"
# SmolLM2-135M's shape (docs/design.md: llama, 30 layers, hidden 576, GQA 9/3, vocab 49152, tied)
SMOLLM2 = dict(
    hidden_size=576,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    intermediate_size=1536,
    vocab_size=49152,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    tie_word_embeddings=True,
)


@pytest.fixture
def trained(tmp_path, monkeypatch) -> Path:
    """An empty trained_dir() (what a machine that never ran the recipe has)."""
    root = tmp_path / "trained"
    monkeypatch.setattr(model_dirs, "trained_dir", lambda: root)
    return root


def write_head(folder: Path, draft_vocab: int = 512) -> Path:
    """A random EAGLE-3 head of SmolLM2's shapes (its hidden size, its aux layers 2, 15, 27, a reduced
    draft vocabulary), written as `specli train eagle3` writes one, trained for package:smollm2-135m."""
    config = head_config_for(AutoConfig.for_model("llama", **SMOLLM2), 49152, "eagle3", draft_vocab, 64)
    head = init_weights(EagleHead(config), seed=0)
    set_vocabulary(head, torch.arange(0, 49152, 49152 // draft_vocab)[:draft_vocab])
    save_head(head, folder, verifier=TARGET)
    return folder


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """SmolLM2's tokenizer, as specli builds it from the GGUF (configs-first folder: no weights)."""
    command = packaged.install_command(packaged.packaged_model("smollm2-135m"))
    if command is not None:
        pytest.skip(f"{TARGET} is not installed: {command}")
    return AutoTokenizer.from_pretrained(loading.resolve_source(TARGET))


def write_draft(folder: Path, tokenizer) -> Path:
    """A one-layer random draft model with SmolLM2's tokenizer, written as `specli train draft` writes
    one (bfloat16, its tokenizer beside it)."""
    save_causal_lm(make_model("llama", len(tokenizer), layers=1, hidden=64, seed=3), tokenizer, folder)
    return folder


# --------------------------------------------------------------------------- the presets


def test_the_presets_name_the_drafters_specli_train_writes():
    """lookup by default (its fastest measured strategy: test_docs), which needs nothing trained; the
    draft model on --strategy draft and the head on eagle, both `trained:NAME`."""
    draft = resolve_preset("smollm2-135m")
    assert (draft.strategy, draft.target.model) == ("lookup", TARGET)
    assert draft.draft.model == f"trained:{DRAFT}" and draft.eagle_head.model == f"trained:{HEAD}"
    assert draft.blockwise_heads.model == f"trained:{HEADS}"
    eagle = resolve_preset("smollm2-135m-eagle3")
    assert (eagle.strategy, eagle.target.model, eagle.draft.model) == ("eagle", TARGET, f"trained:{HEAD}")
    for preset in (draft, eagle):
        assert (preset.target.dtype, preset.generation.chat_template) == ("float32", "on")
        assert preset.speculation.num_draft_tokens == 4
    for name, kind in ((DRAFT, "draft"), (HEAD, "eagle3"), (HEADS, "heads")):
        recipe = model_dirs.RECIPES[name]
        assert (recipe.kind, recipe.target) == (kind, TARGET)
        assert f"scripts/smollm2_train.sh {kind.removesuffix('3')}" in recipe.script


def test_trained_drafters_live_in_specli_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path / "cache"))
    assert model_dirs.trained_dir() == tmp_path / "cache" / "trained"


def test_an_untrained_drafter_names_the_specli_train_command_that_writes_it(trained):
    """Bug caught: a missing trained drafter reported as a folder or hub id that does not exist (no way
    to make it), or as a runtime failure instead of exit 2."""
    for name, kind in ((DRAFT, "draft"), (HEAD, "eagle3"), (HEADS, "heads")):
        with pytest.raises(ModelNotFoundError) as info:
            sources.classify(f"trained:{name}")
        err = info.value
        assert err.exit_code == 2 and "\n" not in err.message and "\n" not in (err.hint or "")
        assert f"`specli train {kind} --target {TARGET} --out {trained / name}` writes it" in err.message
        assert "specli does not ship it" in err.message
        assert f"scripts/smollm2_train.sh {kind.removesuffix('3')}" in err.hint
    with pytest.raises(ModelNotFoundError, match=r"`specli train KIND --target TARGET --out .*/mine`"):
        sources.classify("trained:mine")


def test_a_drafter_still_training_says_how_to_finish_it(trained):
    (trained / DRAFT / "checkpoint").mkdir(parents=True)
    with pytest.raises(ModelNotFoundError) as info:
        sources.classify(f"trained:{DRAFT}")
    assert "still training" in info.value.message
    assert info.value.hint == f"finish it: specli train draft --out {trained / DRAFT} --resume"


def test_presets_show_and_list_say_what_is_not_trained(trained):
    """`presets show smollm2-135m` (lookup: nothing missing for it) keeps its memory estimate and says
    what --strategy draft and eagle would stop at; the eagle3 preset does not run here until its head is
    trained, and says which command trains it. Bug caught: a drafter only another strategy loads making
    the estimate unknown, or the recipe missing from what `presets` prints."""
    preset = resolve_preset("smollm2-135m")
    assert memory.preset_estimate(preset) is not None
    shown = CliRunner().invoke(app, ["presets", "show", "smollm2-135m"])
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.stdout.splitlines() if line.startswith("# --strategy")]
    assert len(lines) == 3, shown.stdout
    assert lines[0].startswith(f"# --strategy draft: trained:{DRAFT} is not trained on this machine")
    assert "specli train draft --target package:smollm2-135m" in lines[0]
    assert lines[1].startswith("# --strategy eagle: ") and "specli train eagle3" in lines[1]
    assert lines[2].startswith(f"# --strategy heads: trained:{HEADS} is not trained")
    assert "specli train heads --target package:smollm2-135m" in lines[2]
    eagle = resolve_preset("smollm2-135m-eagle3")
    ready = readiness(eagle, None, free_memory())
    assert not ready.runs and any("specli train eagle3" in need.text for need in ready.needs)
    write_head(trained / HEAD)
    assert [strategy for strategy, _ in absent_drafters(preset)] == ["draft", "heads"]
    assert not any(HEAD in need.text for need in readiness(eagle, None, free_memory()).needs)


def test_generate_stops_before_loading_and_names_the_command(trained, smollm2_tokenizer):
    """`specli generate --preset smollm2-135m --strategy draft` with no drafter trained: exit 2, two
    lines (the error and the recipe), before any model loads."""
    result = CliRunner().invoke(
        app, ["generate", "Hi", "--preset", "smollm2-135m", "--strategy", "draft", "--max-new-tokens", "4"]
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2, result.output
    assert lines[0].startswith(f"error: trained:{DRAFT} is not trained on this machine")
    assert f"`specli train draft --target {TARGET} --out {trained / DRAFT}`" in lines[0]
    assert "bash scripts/smollm2_train.sh draft" in lines[1]


# --------------------------------------------------------------------------- once trained


def test_the_head_refuses_another_target_in_one_line(trained):
    """The EAGLE-3 head reads SmolLM2's 576-wide hidden states: against the embedded tiny target (256
    wide) it stops before generating, naming the target it was trained for."""
    write_head(trained / HEAD)
    with pytest.raises(ModelLoadError) as info:
        specli.load(target="embedded:tiny-target", draft=f"trained:{HEAD}", strategy="eagle", device="cpu")
    assert "\n" not in info.value.message and "hidden size" in info.value.message
    assert "this head was trained for 'package:smollm2-135m';" in (info.value.hint or "")


def test_the_draft_model_refuses_another_target_in_one_line(trained, smollm2_tokenizer):
    write_draft(trained / DRAFT, smollm2_tokenizer)
    with pytest.raises(UsageError) as info:
        specli.load(target="embedded:tiny-target", draft=f"trained:{DRAFT}", strategy="draft", device="cpu")
    assert "\n" not in info.value.message and "different tokenizers" in info.value.message


@pytest.mark.parametrize(("preset", "name", "method"), [("smollm2-135m", DRAFT, "draft_model"),
                                                        ("smollm2-135m-eagle3", HEAD, "eagle3")])  # fmt: skip
def test_vllm_and_sglang_load_the_trained_files(trained, smollm2_tokenizer, preset, name, method):
    write_draft(trained / DRAFT, smollm2_tokenizer)
    write_head(trained / HEAD)
    pair = ex.resolve_pair(preset, strategy="draft" if preset == "smollm2-135m" else None)
    vllm = ex.export("vllm", pair, ex.ServeOptions())
    config = json.loads(vllm.argv[vllm.argv.index("--speculative-config") + 1])
    assert (config["method"], config["model"], config["num_speculative_tokens"]) == (
        method,
        str(trained / name),
        4,
    )
    assert vllm.argv[2] == str(packaged.packaged_gguf("smollm2-135m"))
    sglang = ex.export("sglang", pair, ex.ServeOptions())
    argv = list(sglang.argv)
    assert argv[argv.index("--speculative-draft-model-path") + 1] == str(trained / name)
    algorithm = argv[argv.index("--speculative-algorithm") + 1]
    assert algorithm == ("STANDALONE" if method == "draft_model" else "EAGLE3")


def test_llama_cpp_converts_the_draft_model_and_the_head_with_a_target_folder(trained, smollm2_tokenizer):
    """The draft model converts as a folder; the head with --target-model-dir naming a folder of SmolLM2
    (config, tokenizer: what the converter reads), never the .gguf file itself."""
    write_draft(trained / DRAFT, smollm2_tokenizer)
    write_head(trained / HEAD)
    draft = ex.export("llama.cpp", ex.resolve_pair("smollm2-135m", strategy="draft"), ex.ServeOptions())
    convert = next(step for step in draft.steps if "convert_hf_to_gguf.py" in step)
    assert convert[2] == str(trained / DRAFT)
    assert draft.argv[draft.argv.index("-md") + 1] == convert[convert.index("--outfile") + 1]
    head = ex.export("llama.cpp", ex.resolve_pair("smollm2-135m-eagle3"), ex.ServeOptions())
    convert = next(step for step in head.steps if "convert_hf_to_gguf.py" in step)
    assert convert[2] == str(trained / HEAD)
    target_dir = Path(convert[convert.index("--target-model-dir") + 1])
    assert target_dir.is_dir() and (target_dir / "config.json").is_file()
    assert head.argv[head.argv.index("--spec-type") + 1] == "draft-eagle3"
