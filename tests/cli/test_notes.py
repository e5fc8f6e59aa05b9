"""Notes on how a generation runs when the command line does not say it (issue 13, item 6): plain
decoding because no drafter was named, and a drafter that drafts from only the most recent part of a long
context. Each is said once on stderr and listed in the JSON (stats.notes)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from conftest import make_model, save_model
from typer.testing import CliRunner

from specli.cli import app
from specli.notes import drafter_window, generation_notes
from specli.settings import resolve_settings

PROMPT = "def fibonacci(n):"
PLAIN = "no drafter given: plain decoding (pass --draft MODEL or --strategy lookup)"


def pair(draft_max_positions=None):
    return SimpleNamespace(draft_max_positions=draft_max_positions)


def test_plain_decoding_is_noted_only_when_nobody_asked_for_it():
    none = resolve_settings(strategy="none", max_new_tokens=10)
    assert generation_notes(pair(), none, 5) == [PLAIN]
    assert generation_notes(pair(), none, 5, strategy_given="none") == []  # --strategy none: as asked
    lookup = resolve_settings(strategy="lookup", max_new_tokens=10)
    assert generation_notes(pair(), lookup, 5) == []


def test_the_drafter_window_is_noted_when_prompt_and_output_outgrow_its_context():
    draft = resolve_settings(strategy="draft", max_new_tokens=100)
    window = "the drafter's context is 512 tokens; it drafts from the most recent 384"
    assert drafter_window(512) == 384
    assert generation_notes(pair(512), draft, 413) == [window]  # 413 + 100 > 512
    assert generation_notes(pair(512), draft, 412) == []  # 512 fits exactly
    assert generation_notes(pair(None), draft, 10_000) == []  # no known limit
    lookup = resolve_settings(strategy="lookup", max_new_tokens=100)
    assert generation_notes(pair(512), lookup, 10_000) == []  # no drafter model


@pytest.fixture(scope="module")
def short_drafter(tmp_path_factory, tokenizer):
    """A target with 256 positions and a drafter with only 64."""
    root = tmp_path_factory.mktemp("short")
    vocab = len(tokenizer)
    target = save_model(root / "target", make_model("llama", vocab, layers=2, seed=1), tokenizer)
    draft = save_model(
        root / "draft", make_model("llama", vocab, layers=1, seed=2, max_positions=64), tokenizer
    )
    return target, draft


def run(*args):
    result = CliRunner().invoke(app, ["generate", PROMPT, *args])
    assert result.exit_code == 0, result.output
    return result


def test_target_alone_says_once_that_it_runs_plain_decoding(short_drafter):
    """Bug: `--target X` alone quietly ran plain decoding. One note on stderr, and in the JSON."""
    target, _ = short_drafter
    plain = run("--target", str(target), "--max-new-tokens", "5")
    assert plain.stderr.count(PLAIN) == 1 and plain.stderr.count("note:") == 1, plain.stderr
    data = json.loads(run("--target", str(target), "--max-new-tokens", "5", "--json").stdout)
    assert data["stats"]["notes"] == [PLAIN] and data["stats"]["strategy"] == "none"
    asked = run("--target", str(target), "--strategy", "none", "--max-new-tokens", "5", "--json")
    assert "note:" not in asked.stderr and json.loads(asked.stdout)["stats"]["notes"] == []


def test_a_drafter_with_a_short_context_is_noted_once_and_still_drafts(short_drafter):
    """Bug: past the drafter's context speculation went silently off while the summary said `draft
    k=4`. The note names the window once; the drafter keeps proposing and the output stays exact."""
    target, draft = short_drafter
    args = ["--target", str(target), "--draft", str(draft), "--max-new-tokens", "80", "-k", "3"]
    note = "the drafter's context is 64 tokens; it drafts from the most recent 48"
    piped = run(*args)
    assert piped.stderr.count(note) == 1 and piped.stderr.count("note:") == 1, piped.stderr
    data = json.loads(run(*args, "--json").stdout)
    assert data["stats"]["notes"] == [note]
    length, drafted_late = len(data["prompt_token_ids"]), 0
    for r in data["rounds"]:
        if length > 64:  # the context no longer fits the drafter
            drafted_late += len(r["drafted"])
        length += len(r["committed"])
    assert length > 64 + 20 and drafted_late > 0  # still drafting past its context
    base = json.loads(
        run("--target", str(target), "--strategy", "none", "--max-new-tokens", "80", "--json").stdout
    )
    assert data["token_ids"] == base["token_ids"]
