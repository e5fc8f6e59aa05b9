"""Options every command shares, checked before anything loads: k's limits, the bench's categories, and
--help that shows no value for on/off flags. Also: the command line is a package whose import stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

import specli
import specli.api
from specli.cli import app, parse_sweep
from specli.cli.options import GenerationOptions, ModelOptions, check_before_loading
from specli.errors import UsageError
from specli.presets import MAX_DRAFT_TOKENS
from tests.conftest import make_model, save_model


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLI_PRESETS", str(tmp_path / "no-user-presets"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SPECLI_DEBUG", raising=False)


@pytest.fixture
def no_loading(monkeypatch):
    """Any model load fails the test: the error must come first."""

    def trap(*args, **kwargs):
        raise AssertionError("models were loaded before the input was checked")

    monkeypatch.setattr(specli.api, "load", trap)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


# --------------------------------------------------------------------------- --help


@pytest.mark.parametrize("command", [[], ["generate"], ["explain"], ["bench"], ["presets", "list"]])
def test_flags_show_no_value_in_help(command):
    """`--fixed-k <bool>` read as if the flag took a value; flags show none, valued options keep theirs."""
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "<bool>" not in result.output
    assert "--help" in result.output
    if command == ["generate"]:
        assert "--fixed-k" in result.output and "<int>" in result.output  # -k still names its type


def test_help_imports_no_torch():
    """`specli --help` stays fast: neither the package nor a command's help imports torch."""
    probe = (
        "import sys; from typer.testing import CliRunner; from specli.cli import app; "
        "r = CliRunner().invoke(app, ['bench', '--help']); print(r.exit_code, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["0", "False"], done.stderr


# --------------------------------------------------------------------------- k's limits


@pytest.mark.parametrize("command", ["generate", "explain"])
def test_k_above_the_maximum_is_a_usage_error_before_loading(no_loading, command):
    result = invoke(command, "x", "-k", "1000")
    assert result.exit_code == 2
    assert f"between 1 and {MAX_DRAFT_TOKENS} (got 1000)" in result.output


def test_k_at_the_maximum_passes_the_settings_check():
    from specli.settings import resolve_settings

    assert resolve_settings(num_draft_tokens=MAX_DRAFT_TOKENS).num_draft_tokens == MAX_DRAFT_TOKENS
    with pytest.raises(UsageError, match="between 1 and"):
        resolve_settings(num_draft_tokens=MAX_DRAFT_TOKENS + 1)


def test_parse_sweep_limits():
    assert parse_sweep(f"1-{MAX_DRAFT_TOKENS}")[-1] == MAX_DRAFT_TOKENS
    with pytest.raises(UsageError, match="reversed range") as reversed_range:
        parse_sweep("8-2")
    assert "2-8" in str(reversed_range.value)  # the fix, written the right way round
    for too_many in ("2-2000", f"2,{MAX_DRAFT_TOKENS + 1}"):
        with pytest.raises(UsageError, match=f"largest k, {MAX_DRAFT_TOKENS}"):
            parse_sweep(too_many)


def test_bench_sweep_past_the_maximum_fails_before_loading(no_loading):
    result = invoke("bench", "--sweep-k", "2-2000")
    assert result.exit_code == 2
    assert "largest k" in result.output


def test_k_that_cannot_fit_the_context_names_it(tmp_path, tokenizer):
    """A 24-token target: a round needs a prompt token + the last token + k drafts, so k <= 22."""
    target = save_model(tmp_path / "t", make_model(max_positions=24, seed=1), tokenizer)
    draft = save_model(tmp_path / "d", make_model(max_positions=24, seed=2, layers=1), tokenizer)
    pair = specli.load(target=str(target), draft=str(draft), device="cpu", threads=None)
    assert pair.settings(num_draft_tokens=22).num_draft_tokens == 22
    with pytest.raises(UsageError, match=r"does not fit the context of .*\(24 tokens\)") as error:
        pair.settings(num_draft_tokens=23)
    assert "-k 22 or less" in str(error.value)
    with pytest.raises(UsageError, match="does not fit"):
        pair.generate("def", num_draft_tokens=30, max_new_tokens=2)
    assert pair.settings(strategy="none", num_draft_tokens=30).strategy == "none"  # plain drafts nothing


def test_the_check_before_loading_and_the_loaded_check_say_the_same(tmp_path, tokenizer):
    """One check (settings.check_fits) on both paths: the CLI's on the folders' config.json before torch
    loads, Pair.settings' on the loaded models. Catches the two drifting apart (a limit or a wording)."""
    target = save_model(tmp_path / "t", make_model(max_positions=24, seed=1), tokenizer)
    draft = save_model(tmp_path / "d", make_model(max_positions=12, seed=2, layers=1), tokenizer)
    models = ModelOptions(target=str(target), draft=str(draft), strategy="draft")
    with pytest.raises(UsageError) as early:
        check_before_loading(models, GenerationOptions(num_draft_tokens=11))
    pair = specli.load(target=str(target), draft=str(draft), device="cpu", threads=None)
    with pytest.raises(UsageError) as loaded:
        pair.settings(GenerationOptions(num_draft_tokens=11))
    assert str(early.value) == str(loaded.value)
    assert "'" + str(draft) + "' (12 tokens)" in str(loaded.value)
    assert check_before_loading(models, GenerationOptions(num_draft_tokens=10)).num_draft_tokens == 10
    assert pair.settings(GenerationOptions(num_draft_tokens=10)).num_draft_tokens == 10


def test_a_preset_whose_drafter_is_not_trained_still_runs_its_lookup(tmp_path, tokenizer):
    """The SmolLM2 presets name drafters that `specli train` writes (trained:NAME, not shipped): a strategy
    that reads no drafter runs without one (the check before loading once demanded it, so the preset's
    own default strategy failed); one that needs it says how to get it (exit 2)."""
    target = save_model(tmp_path / "t", make_model(seed=1), tokenizer)
    preset = tmp_path / "p.yaml"
    preset.write_text(
        "name: p\nstrategy: lookup\n"
        f"target:\n  model: '{target}'\ndraft:\n  model: 'trained:never-trained-draft'\n"
    )
    ok = invoke("generate", "def f(x):", "--preset", str(preset), "--max-new-tokens", "4", "--device", "cpu")
    assert ok.exit_code == 0, ok.output
    needs = invoke("generate", "def f(x):", "--preset", str(preset), "--strategy", "draft", "--device", "cpu")
    assert needs.exit_code == 2 and "trained:never-trained-draft" in needs.output
    assert "Traceback" not in needs.output


def test_a_longer_drafter_context_does_not_hide_a_short_one(tmp_path, tokenizer):
    """The drafter's own context limits k under strategy draft, not under lookup."""
    target = save_model(tmp_path / "t", make_model(max_positions=256, seed=1), tokenizer)
    draft = save_model(tmp_path / "d", make_model(max_positions=16, seed=2, layers=1), tokenizer)
    pair = specli.load(target=str(target), draft=str(draft), device="cpu", threads=None)
    with pytest.raises(UsageError, match=r"\(16 tokens\)"):
        pair.settings(num_draft_tokens=20)
    assert pair.settings(strategy="lookup", num_draft_tokens=20).num_draft_tokens == 20


# --------------------------------------------------------------------------- bench categories


def test_unknown_category_fails_before_loading_and_lists_the_sets(no_loading):
    result = invoke("bench", "--category", "nope")
    assert result.exit_code == 2
    assert "no prompts in category 'nope'" in result.output
    assert "code: completion, editing, docstring" in result.output
    assert "chat:" in result.output and "math" in result.output


def test_category_of_the_other_packaged_set_passes_the_early_check():
    """Which packaged set runs is chosen by the model, so a chat category passes before loading."""
    from specli.bench.prompts import check_packaged_categories

    check_packaged_categories(["math", "editing"])
    with pytest.raises(UsageError):
        check_packaged_categories(["editing", "nope"])


def test_unknown_category_of_a_named_set_fails_before_loading(no_loading):
    result = invoke("bench", "--set", "code", "--category", "math")
    assert result.exit_code == 2
    assert "Categories here: completion, editing, docstring" in result.output
