"""The embedded tiny pair: its training recipe (quick mode), the LayerSkip forward, the corpus split, and
the shipped weights as the default preset."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import make_model
from transformers import AutoModelForCausalLM, AutoTokenizer

import specli
from specli.errors import ModelLoadError
from specli.models.loading import embedded_dir, embedded_names, resolve_source
from specli.training.corpus import is_validation, load_corpus, stdlib_files, stdlib_root
from specli.training.layerskip import LayerSkipConfig, depth_logits, layer_dropout_rates, layerskip_loss
from specli.training.tiny import DRAFT_DIR, TARGET_DIR, quick_recipe, run

# --------------------------------------------------------------------------- recipe pieces


def test_layer_dropout_rises_with_depth_from_zero():
    rates = layer_dropout_rates(8, 0.2)
    assert rates[0] == 0.0 and rates[-1] == pytest.approx(0.2)
    assert all(a < b for a, b in zip(rates, rates[1:], strict=False))


def test_manual_forward_matches_the_model():
    model = make_model("llama", layers=3, hidden=64, init_range=0.05)
    ids = torch.randint(0, 384, (2, 17), generator=torch.Generator().manual_seed(0))
    logits = depth_logits(model, ids, [1, 3])
    torch.testing.assert_close(logits[3], model(input_ids=ids).logits.float(), atol=1e-5, rtol=1e-4)
    # the exit after one layer is a real, different prediction through the shared norm + head
    assert not torch.allclose(logits[1], logits[3], atol=1e-3)


def test_layerskip_loss_without_exits_is_the_model_loss():
    model = make_model("llama", layers=3, hidden=64, init_range=0.05)
    ids = torch.randint(0, 384, (2, 17), generator=torch.Generator().manual_seed(1))
    loss, parts = layerskip_loss(model, ids, LayerSkipConfig())
    reference = torch.nn.functional.cross_entropy(
        model(input_ids=ids[:, :-1]).logits.flatten(0, 1), ids[:, 1:].flatten()
    )
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)
    assert parts == {3: pytest.approx(reference.item(), rel=1e-5)}


def test_layerskip_loss_adds_weighted_exits():
    model = make_model("llama", layers=3, hidden=64, init_range=0.05)
    ids = torch.randint(0, 384, (2, 17), generator=torch.Generator().manual_seed(2))
    config = LayerSkipConfig(exit_weights={1: 0.5, 2: 0.25}, exit_fraction=1.0)
    loss, parts = layerskip_loss(model, ids, config, torch.Generator().manual_seed(0))
    assert set(parts) == {1, 2, 3}
    assert loss.item() == pytest.approx(parts[3] + 0.5 * parts[1] + 0.25 * parts[2], rel=1e-5)


def test_corpus_split_is_deterministic_and_disjoint():
    files = stdlib_files(stdlib_root())
    assert files and all(f.suffix == ".py" for f in files)
    parts = {part for f in files for part in f.relative_to(stdlib_root()).parts[:-1]}
    assert not parts & {"site-packages", "test", "tests"}
    first, second = load_corpus(max_files=60), load_corpus(max_files=60)
    assert first.train_names == second.train_names and first.validation_names == second.validation_names
    assert not set(first.train_names) & set(first.validation_names)
    assert all(is_validation(n) for n in first.validation_names)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    report = run(out, quick_recipe(), log=lambda *_: None)
    return out, report


def test_quick_recipe_losses_fall(quick_run):
    out, report = quick_run
    target = report["target"]["history"]
    assert target[-1]["loss"] < target[0]["loss"] - 0.5
    draft = report["draft"]["history"]
    assert draft[-1]["kl"] < draft[0]["kl"]
    assert json.loads((out / "training.json").read_text())["validation"]["target_loss"] > 0


def test_quick_recipe_folders_load_and_generate_losslessly(quick_run):
    out, _ = quick_run
    pair = specli.load(target=str(out / TARGET_DIR), draft=str(out / DRAFT_DIR), device="cpu")
    result = pair.generate("def main():\n", max_new_tokens=12)
    model = AutoModelForCausalLM.from_pretrained(out / TARGET_DIR, dtype=torch.float32).eval()
    ids = torch.tensor([result.prompt_token_ids])
    expected = model.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1] :].tolist()
    cut = next((i + 1 for i, t in enumerate(expected) if t in pair.eos_ids), len(expected))
    assert result.token_ids == expected[:cut]


# --------------------------------------------------------------------------- the shipped pair


def test_unknown_embedded_name_is_a_clear_error():
    with pytest.raises(ModelLoadError, match="no embedded model named 'nope'"):
        resolve_source("embedded:nope")


def test_embedded_models_resolve_to_package_folders():
    assert {"tiny-target", "tiny-draft"} <= set(embedded_names())
    assert resolve_source("embedded:tiny-target") == embedded_dir() / "tiny-target"


@pytest.mark.parametrize(
    "text", ["Hôm nay trời rất đẹp", "emoji 🙂🚀 and 東京", "def f(x):\n\treturn x  # ok\n"]
)
def test_shipped_tokenizer_round_trips_any_text(text):
    tokenizer = AutoTokenizer.from_pretrained(embedded_dir() / "tiny-target")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert 4096 <= len(tokenizer) <= 8192


def test_shipped_pair_sizes():
    config = json.loads((embedded_dir() / "tiny-target" / "config.json").read_text())
    assert config["model_type"] == "llama" and 6 <= config["num_hidden_layers"] <= 8
    assert config["max_position_embeddings"] >= 512
    draft = json.loads((embedded_dir() / "tiny-draft" / "config.json").read_text())
    assert 1 <= draft["num_hidden_layers"] <= 2


# The shipped drafters and the stored dtype of their float weights: bfloat16 (what `specli train` writes),
# or float16 for the ones trained before it did (converting them would add their size to the history)
SHIPPED_DRAFTERS = {
    "tiny-draft": "BF16",
    "tiny-eagle3": "BF16",
    "tiny-eagle1": "F16",
    "tiny-pard": "F16",
    "tiny-peagle": "F16",
    "tiny-heads": "BF16",
}
EMBEDDED_BUDGET = 40 * 2**20  # every embedded model together (the SmolLM2 drafters, 44 MB, left it)


def _float_dtypes(folder) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        dtypes = {str(f.get_slice(name).get_dtype()) for name in f.keys()}  # noqa: SIM118
    return {d for d in dtypes if d.startswith(("F", "BF"))}


def test_the_shipped_drafters_are_half_width_named_in_their_config_and_fit_the_budget():
    """Catches a float32 export (twice the size), a config naming another dtype than its weights', a head
    saved without its vocabulary maps, a drafter without the record of its training, a shipped drafter
    no committed bench backs (SHIPPED_DRAFTERS is the list), and the embedded folder growing past
    40 MiB."""
    root = embedded_dir()
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert total <= EMBEDDED_BUDGET, f"{total / 2**20:.1f} MiB embedded"
    assert set(embedded_names()) == {"tiny-target", *SHIPPED_DRAFTERS}
    names = {"BF16": "bfloat16", "F16": "float16"}
    for name, stored in SHIPPED_DRAFTERS.items():
        folder = root / name
        assert _float_dtypes(folder) == {stored}, name
        config = json.loads((folder / "config.json").read_text())
        assert config.get("dtype", config.get("torch_dtype", names[stored])) == names[stored], name
        if "speculators_model_type" in config:  # EAGLE-3 / P-EAGLE: their draft vocabulary's maps
            from safetensors import safe_open

            with safe_open(str(folder / "model.safetensors"), "pt") as f:
                assert {"d2t", "t2d"} <= set(f.keys()), name
        record = folder / "training.json" if name != "tiny-draft" else root / "training.json"
        assert record.is_file(), f"{name}: no record of its training"
    assert _float_dtypes(root / "tiny-target") == {"F16"}


def test_default_is_the_tiny_pair_and_lossless():
    pair = specli.load(device="cpu")
    assert pair.strategy == "draft" and pair.target_name == "embedded:tiny-target"
    result = pair.generate("def fibonacci(n):\n", max_new_tokens=24)
    ids = torch.tensor([result.prompt_token_ids])
    expected = pair.target_model.generate(ids, max_new_tokens=24, do_sample=False)[0, ids.shape[1] :]
    expected = expected.tolist()
    eos = pair.eos_ids
    cut = next((i + 1 for i, t in enumerate(expected) if t in eos), len(expected))
    assert result.token_ids == expected[:cut]
    assert result.stats.accepted > 0


@pytest.mark.parametrize("strategy", ["draft", "self"])
def test_drafters_agree_with_the_target_on_unseen_code(strategy):
    """The distilled drafter and the early exit really agree with the target on code written here."""
    pair = specli.load(device="cpu")
    prompt = (
        "def render_table(rows, headers):\n"
        '    """Return the rows as a text table with the given headers."""\n'
        "    widths = [len(h) for h in headers]\n"
        "    for row in rows:\n"
    )
    result = pair.generate(prompt, max_new_tokens=48, num_draft_tokens=4, strategy=strategy)
    assert result.stats.acceptance_rate >= 0.4, result.stats.acceptance_rate
