"""Settings resolved once (specli/settings.py): the preset, then the caller's overrides, ranges from the
preset's schema, one frozen object that generate, explain and bench all read; `Pair.settings` adds the
exit layer's default and range. Also: the CLI's startup path imports neither torch nor transformers.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest
from conftest import make_model
from typer.testing import CliRunner

import specli.api
import specli.bench.run
import specli.models.loading
from specli.cli import app
from specli.errors import UsageError
from specli.pair import Pair
from specli.presets import GenerationSpec, ModelSpec, Preset, SpeculationSpec
from specli.settings import STRATEGIES, Settings, default_exit_layer, resolve_settings

PROMPT = [5, 6, 7, 8]


def preset(**parts) -> Preset:
    return Preset(name="p", strategy="lookup", target=ModelSpec(model="a/b"), **parts)


@pytest.fixture(autouse=True)
def no_user_presets(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLI_PRESETS", str(tmp_path / "none"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


# ----------------------------------------------------------------------------- resolution


def test_without_a_preset_the_schema_defaults_apply():
    s = resolve_settings()
    gen, spec = GenerationSpec(), SpeculationSpec()
    assert (s.max_new_tokens, s.temperature, s.top_k, s.top_p) == (
        gen.max_new_tokens, gen.temperature, gen.top_k, gen.top_p,
    )  # fmt: skip
    assert (s.num_draft_tokens, s.ngram_min, s.ngram_max, s.exit_layer) == (
        spec.num_draft_tokens, spec.ngram_min, spec.ngram_max, spec.exit_layer,
    )  # fmt: skip
    assert s.strategy == "draft" and s.seed is None and s.stop == () and s.chat is None


def test_the_preset_first_then_the_overrides():
    p = preset(
        generation=GenerationSpec(max_new_tokens=7, temperature=0.5, top_k=3, top_p=0.9),
        speculation=SpeculationSpec(num_draft_tokens=6, ngram_min=2, ngram_max=5, exit_layer=2),
    )
    s = resolve_settings(p)
    assert (s.strategy, s.max_new_tokens, s.temperature, s.top_k, s.top_p) == ("lookup", 7, 0.5, 3, 0.9)
    assert (s.num_draft_tokens, s.ngram_min, s.ngram_max, s.exit_layer) == (6, 2, 5, 2)
    over = resolve_settings(p, temperature=0.0, num_draft_tokens=2, strategy="none", stop=["\n"], seed=4)
    assert (over.temperature, over.num_draft_tokens, over.strategy) == (0.0, 2, "none")
    assert over.stop == ("\n",) and over.seed == 4
    assert (over.max_new_tokens, over.top_k, over.ngram_max) == (7, 3, 5)  # untouched: the preset's


def test_none_means_unset():
    p = preset(generation=GenerationSpec(temperature=0.7))
    assert resolve_settings(p, temperature=None, top_k=None) == resolve_settings(p)


def test_an_unknown_setting_is_a_type_error():
    with pytest.raises(TypeError, match="temprature"):
        resolve_settings(temprature=0.5)


def test_values_take_the_schema_types():
    s = resolve_settings(temperature=1, top_k="3", stop="ab")
    assert s.temperature == 1.0 and isinstance(s.temperature, float)
    assert s.top_k == 3 and isinstance(s.top_k, int)
    assert s.stop == ("ab",)  # one stop string, not its characters


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_new_tokens": 0}, "max-new-tokens must be at least 1 (got 0)."),
        ({"temperature": -1.0}, "temperature must be a number >= 0 (got -1.0); 0 is greedy decoding."),
        ({"temperature": float("nan")}, "temperature must be a number >= 0 (got nan)"),
        ({"temperature": float("inf")}, "temperature must be a number >= 0 (got inf)"),
        ({"top_k": -1}, "top-k must be >= 0 (got -1); 0 turns it off."),
        ({"top_p": 1.5}, "top-p must be in (0, 1] (got 1.5); 1 turns it off."),
        ({"top_p": 0.0}, "top-p must be in (0, 1] (got 0.0)"),
        ({"num_draft_tokens": 0}, "num-draft-tokens must be between 1 and 64 (got 0)."),
        ({"num_draft_tokens": 65}, "num-draft-tokens must be between 1 and 64 (got 65)."),
        ({"ngram_min": 0}, "ngram-min must be at least 1 (got 0)."),
        ({"ngram_min": 2, "ngram_max": 1}, "ngram-max (1) must be at least ngram-min (2)."),
        ({"exit_layer": 0}, "exit-layer must be at least 1 (got 0)."),
        ({"top_k": 1.5}, "top-k: input should be a valid integer"),
        ({"seed": "x"}, "seed must be a whole number (got 'x')."),
        ({"strategy": "medusa"}, "unknown strategy 'medusa'."),
    ],
)
def test_each_bad_value_names_its_option(overrides, message):
    with pytest.raises(UsageError) as info:
        resolve_settings(**overrides)
    assert info.value.exit_code == 2
    assert info.value.message.startswith(message), info.value.message


def test_strategies_come_from_the_preset_schema():
    assert set(STRATEGIES) == {"draft", "lookup", "self", "none", "eagle", "heads"}
    with pytest.raises(UsageError) as info:
        resolve_settings(strategy="medusa")
    assert all(name in info.value.hint for name in STRATEGIES)


def test_settings_are_frozen_and_replace_validates_again():
    s = resolve_settings(top_p=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.top_p = 2.0  # type: ignore[misc]
    assert s.replace(top_p=0.8).top_p == 0.8 and s.top_p == 0.5
    with pytest.raises(UsageError, match="top-p"):
        s.replace(top_p=2.0)
    with pytest.raises(UsageError, match="ngram-max"):
        s.replace(ngram_max=0)
    with pytest.raises(TypeError, match="top_q"):
        s.replace(top_q=0.5)
    with pytest.raises(UsageError, match="num-draft-tokens"):
        Settings("draft", 10, 0, 0.0, 0, 1.0)  # built directly: validated too


def test_sampling_greedy_and_to_dict():
    s = resolve_settings(temperature=0.7, top_k=5, top_p=0.9, stop=["x"])
    assert (s.sampling.temperature, s.sampling.top_k, s.sampling.top_p) == (0.7, 5, 0.9)
    assert not s.greedy and resolve_settings().greedy
    data = s.to_dict()
    assert data["stop"] == ["x"] and data["top_k"] == 5
    assert json.loads(json.dumps(data)) == data


# ----------------------------------------------------------------------------- Pair.settings


@pytest.fixture(scope="module")
def four_layers():
    return make_model("llama", layers=4)


def test_pair_settings_fill_the_exit_layer_with_a_quarter_of_the_depth(tokenizer):
    model = make_model("llama", layers=8)
    pair = Pair(model, tokenizer, strategy="self")
    assert pair.settings().exit_layer == default_exit_layer(8) == 2
    assert pair.settings(exit_layer=5).exit_layer == 5
    # a pair whose own strategy is not 'self' still knows it (bench's early-exit comparison reads it)
    assert Pair(model, tokenizer, strategy="lookup").settings().exit_layer == 2


def test_pair_settings_take_the_presets_exit_layer(tokenizer, four_layers):
    pair = Pair(four_layers, tokenizer, strategy="self", speculation=SpeculationSpec(exit_layer=3))
    assert pair.settings().exit_layer == 3


@pytest.mark.parametrize("layer", [4, 9])
def test_pair_settings_check_the_exit_layer_against_the_model(tokenizer, four_layers, layer):
    pair = Pair(four_layers, tokenizer, strategy="self")
    with pytest.raises(UsageError, match="between 1 and 3"):
        pair.settings(exit_layer=layer)
    with pytest.raises(UsageError, match="between 1 and 3"):  # also reached through settings.replace
        pair.stream(prompt_ids=PROMPT, settings=pair.settings().replace(exit_layer=layer))
    lookup = Pair(four_layers, tokenizer, strategy="lookup")
    with pytest.raises(UsageError, match="between 1 and 3"):
        lookup.settings(strategy="self", exit_layer=layer)


def test_pair_settings_refuse_draft_without_a_drafter(tokenizer, four_layers):
    pair = Pair(four_layers, tokenizer, strategy="lookup")
    with pytest.raises(UsageError, match="needs a drafter model"):
        pair.settings(strategy="draft")


def test_stream_checks_its_settings_before_the_first_round(tokenizer, four_layers):
    pair = Pair(four_layers, tokenizer, strategy="lookup")
    with pytest.raises(UsageError, match="top-p"):
        pair.stream(prompt_ids=PROMPT, top_p=0)  # raised by the call, not by the first next()


def test_keyword_overrides_and_a_settings_object_give_the_same_output(tokenizer, four_layers):
    pair = Pair(four_layers, tokenizer, strategy="lookup")
    kwargs = dict(max_new_tokens=12, temperature=0.8, top_k=20, seed=3, num_draft_tokens=3)
    by_keywords = pair.generate(prompt_ids=PROMPT, **kwargs)
    by_object = pair.generate(prompt_ids=PROMPT, settings=pair.settings(**kwargs))
    assert by_keywords.token_ids == by_object.token_ids
    same = pair.generate(prompt_ids=PROMPT, settings=pair.settings(**kwargs), seed=None, top_k=None)
    assert same.token_ids == by_keywords.token_ids  # None: unset, the object's seed and top-k stay
    shorter = pair.generate(prompt_ids=PROMPT, settings=pair.settings(**kwargs), max_new_tokens=5)
    assert shorter.token_ids == pair.generate(prompt_ids=PROMPT, **{**kwargs, "max_new_tokens": 5}).token_ids
    assert len(shorter.token_ids) <= 5


# ----------------------------------------------------------------------------- the CLI


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_a_bad_value_fails_before_any_model_loads(tiny_pair, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(specli.api, "load", no_loading)
    monkeypatch.setattr(specli.models.loading, "resolve_source", no_loading)
    target, draft = tiny_pair
    for args in (["--top-p", "1.5"], ["-k", "0"], ["--strategy", "lookup", "--ngram-max", "0"]):
        result = invoke("generate", "hi", "--target", str(target), "--draft", str(draft), *args)
        assert result.exit_code == 2 and "a model was loaded" not in result.output, result.output


def test_generate_and_bench_read_the_same_settings(tiny_pair, monkeypatch):
    """The Settings the CLI hands the engine (generate) and bench equal Pair.settings of the same options."""
    seen: dict[str, Settings] = {}
    real_stream = Pair.stream

    def stream(self, *args, settings=None, **kwargs):
        seen["generate"] = settings
        return real_stream(self, *args, settings=settings, **kwargs)

    class Stop(Exception):
        pass

    def run_bench(pair, encoded, strategies, bench, **kwargs):  # progress, hf_modes, endpoints, ...
        seen["bench"] = bench.settings
        seen["pair"] = pair.settings(
            max_new_tokens=6, num_draft_tokens=3, temperature=0.5, seed=2, exit_layer=2, ngram_max=4
        )
        raise Stop

    monkeypatch.setattr(Pair, "stream", stream)
    monkeypatch.setattr(specli.bench.run, "run_bench", run_bench)
    target, draft = tiny_pair
    options = ["--target", str(target), "--draft", str(draft), "--device", "cpu", "-k", "3"]
    options += ["--max-new-tokens", "6", "--temperature", "0.5", "--seed", "2"]
    options += ["--exit-layer", "2", "--ngram-max", "4"]
    assert invoke("generate", "def f(x):", *options, "--json").exit_code == 0
    invoke("bench", *options, "--limit", "1")
    assert isinstance(seen["generate"], Settings)
    assert seen["generate"] == seen["bench"] == seen["pair"]
    assert seen["generate"].num_draft_tokens == 3 and seen["generate"].exit_layer == 2


# ----------------------------------------------------------------------------- startup cost

STARTUP = textwrap.dedent(
    """
    import sys
    from specli.cli import main
    for args in (["--version"], ["--help"], ["presets", "list"], ["presets", "list", "--json"]):
        try:
            main(args)
        except SystemExit as e:
            assert not e.code, (args, e.code)
    heavy = sorted(m for m in ("torch", "transformers", "accelerate") if m in sys.modules)
    print("HEAVY", heavy)
    """
)


def test_version_help_and_presets_list_import_no_torch(tmp_path):
    """`specli --version`, `--help` and `presets list` (its memory estimates too) stay torch-free: an
    `import torch` added to cli.py, specli/__init__.py, presets.py, memory.py or settings.py fails this."""
    result = subprocess.run(
        [sys.executable, "-c", STARTUP], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "tiny" in result.stdout  # presets list ran, with the embedded preset's estimate
    assert "HEAVY []" in result.stdout, result.stdout.splitlines()[-1]


def test_a_strategy_typo_gets_the_nearest_name_everywhere_it_is_checked():
    """bench and the Python API call check_strategy directly. Catches: 'Did you mean' only in the CLI."""
    from specli.settings import check_strategy

    with pytest.raises(UsageError) as info:
        check_strategy("eagel")
    assert "unknown strategy 'eagel'. Did you mean 'eagle'?" in str(info.value)
    with pytest.raises(UsageError) as info:
        check_strategy("zzzz")
    assert "Did you mean" not in str(info.value)
    assert check_strategy("lookup") == "lookup"
