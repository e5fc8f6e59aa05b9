"""A pair holds an EAGLE head and blockwise heads side by side (the preset's `head:` and `heads:` slots):
one load (and one bench run) runs strategies eagle and heads each with its own weights, a slot left out
loads on first use, `--draft` names the head of the first strategy that drafts with one, and a slot given
the other kind of head is refused in one line."""

from __future__ import annotations

import json

import pytest
from conftest import make_model
from test_eagle import make_head
from test_sequential_heads import sequential_heads
from typer.testing import CliRunner

import specli
from specli.cli import app
from specli.errors import PresetError, UsageError
from specli.models.blockwise_heads import BlockwiseHeads, save_heads
from specli.models.eagle_head import EagleHead
from specli.models.head_formats import save_head
from specli.presets import load_preset_file

PROMPT = "def fibonacci(n):"


@pytest.fixture(scope="module")
def folders(tiny_pair, tmp_path_factory):
    """(target, draft, EAGLE-1 head, sequential heads, preset file naming all four)."""
    root = tmp_path_factory.mktemp("slots")
    model = make_model("llama", 384, layers=4, seed=1)
    eagle = root / "eagle1"
    save_head(make_head(model, "eagle1"), eagle)
    heads = save_heads(sequential_heads(model, k=3), root / "heads", str(tiny_pair[0]))
    preset = root / "both.yaml"
    preset.write_text(
        f"name: both\nstrategy: draft\ntarget:\n  model: {tiny_pair[0]}\ndraft:\n  model: {tiny_pair[1]}\n"
        f"head:\n  model: {eagle}\nheads:\n  model: {heads}\nspeculation:\n  num_draft_tokens: 3\n"
        "generation:\n  chat_template: 'off'\n"
    )
    return tiny_pair[0], tiny_pair[1], eagle, heads, preset


def test_one_load_holds_both_heads_and_each_strategy_drafts_with_its_own(folders):
    target, _, eagle, heads, preset = folders
    pair = specli.load(preset=str(preset), strategy=["eagle", "heads"], device="cpu")
    assert isinstance(pair.head, EagleHead) and isinstance(pair.heads, BlockwiseHeads)
    assert pair.head_name == str(eagle) and pair.heads_name == str(heads)
    plain = specli.load(target=str(target), strategy="none", device="cpu")
    for p in (pair, plain):
        p.eos_ids = set()
    ids = pair.encode(PROMPT, chat=False)
    expected = plain.generate(prompt_ids=ids, max_new_tokens=16).token_ids
    for strategy, head in (("eagle", "eagle1"), ("heads", "heads")):
        result = pair.generate(prompt_ids=ids, max_new_tokens=16, strategy=strategy)
        assert result.token_ids == expected, strategy
        drafted = [r for r in result.rounds if r.drafted]
        assert drafted and all(r.info["head"] == head for r in drafted), strategy


def test_a_slot_left_out_loads_on_first_use(folders):
    """Loaded for draft only, the pair loads the preset's heads (and then its EAGLE head) when a
    generation asks for heads (eagle): each into its own slot, neither replacing the other."""
    _, _, _, heads, preset = folders
    pair = specli.load(preset=str(preset), device="cpu")
    assert pair.head is None and pair.heads is None
    pair.generate(PROMPT, strategy="heads", max_new_tokens=4)
    assert isinstance(pair.heads, BlockwiseHeads) and pair.head is None and pair.heads_name == str(heads)
    pair.generate(PROMPT, strategy="eagle", max_new_tokens=4)
    assert isinstance(pair.head, EagleHead) and isinstance(pair.heads, BlockwiseHeads)


def test_draft_names_the_head_of_the_first_strategy_that_drafts_with_one(folders, tmp_path):
    """With eagle and heads, --draft goes to the one listed first and the preset names the other."""
    target, _, eagle, heads, preset = folders
    other = save_heads(
        sequential_heads(make_model("llama", 384, layers=4, seed=1), k=2, seed=9), tmp_path / "o"
    )
    pair = specli.load(preset=str(preset), strategy=["heads", "eagle"], draft=str(other), device="cpu")
    assert pair.heads_name == str(other) and pair.heads.config.num_heads == 2 and pair.head_name == str(eagle)
    with pytest.raises(UsageError, match="holds blockwise heads"):
        specli.load(preset=str(preset), strategy=["eagle", "heads"], draft=str(other), device="cpu")
    with pytest.raises(UsageError, match="holds an EAGLE head"):
        specli.load(target=str(target), strategy="heads", draft=str(eagle), device="cpu")


def test_a_heads_slot_given_an_eagle_head_is_refused_in_one_line(folders, tmp_path):
    target, draft, eagle, _, _ = folders
    preset = tmp_path / "wrong.yaml"
    preset.write_text(f"name: wrong\nstrategy: none\ntarget:\n  model: {target}\nheads:\n  model: {eagle}\n")
    pair = specli.load(preset=str(preset), device="cpu")
    with pytest.raises(UsageError) as err:
        pair.generate(PROMPT, strategy="heads", max_new_tokens=4)
    assert "\n" not in str(err.value) and "holds an EAGLE head" in str(err.value)
    lone = tmp_path / "lone.yaml"
    lone.write_text(f"name: lone\nstrategy: heads\ntarget:\n  model: {target}\n")
    with pytest.raises(PresetError, match="needs blockwise heads as `draft:` \\(or `heads:`\\)"):
        load_preset_file(lone)


def test_bench_runs_eagle_and_heads_in_one_run(folders, tmp_path):
    """One bench run measures plain, eagle and heads on the same prompts (each row lossless)."""
    _, _, _, _, preset = folders
    out = tmp_path / "run.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--preset", str(preset), "--strategy", "eagle", "--strategy", "heads", "--set", "code",
         "--limit", "1", "--max-new-tokens", "12", "--warmup", "0", "--threads", "1", "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert {"none", "eagle", "heads"} <= set(data["summary"]["overall"])
    assert not data.get("errors")
