"""`Result.stats` in Python carries what `generate --json`'s "stats" has (issue 28 #30): the strategy, the
k, fixed_k, draft_p_min, mean_k, compile_time, interrupted and the notes beside the counts, as
attributes and through `to_dict()`, with the same keys and values as the command's JSON for the same
generation. Embedded tiny pair, CPU, greedy."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import specli
from specli.cli import app
from specli.strategies import LOOKUP_DRAFT_TOKENS

PROMPT = "def fibonacci(n):"
TIMES = {"tokens_per_second", "elapsed_s", "draft_time_s", "verify_time_s"}  # differ between two runs


@pytest.fixture(scope="module")
def pair():
    return specli.load(device="cpu")


def cli_stats(*args: str) -> dict:
    result = CliRunner().invoke(app, ["generate", PROMPT, "--device", "cpu", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["stats"]


@pytest.mark.parametrize(
    ("cli", "python"),
    [
        (["--max-new-tokens", "12", "-k", "3", "--fixed-k"], {"num_draft_tokens": 3, "fixed_k": True}),
        (
            ["--max-new-tokens", "12", "--strategy", "lookup", "--fixed-k"],
            {"strategy": "lookup", "fixed_k": True},
        ),
    ],
)
def test_python_result_stats_has_the_json_stats_keys_and_values(pair, cli, python):
    """Catches Result.stats being bare Stats (no strategy, no num_draft_tokens: issue 28 #30) and the two
    drifting apart: the keys are the same set, every value but the times the same (fixed k: the rounds
    do not follow measured speed)."""
    result = pair.generate(PROMPT, max_new_tokens=12, **python)
    stats = result.stats
    assert stats.strategy == python.get("strategy", "draft")
    assert stats.num_draft_tokens == python.get(
        "num_draft_tokens", LOOKUP_DRAFT_TOKENS if stats.strategy == "lookup" else 4
    )
    assert stats.mean_k == stats.drafted / stats.rounds and stats.compile_time is None
    assert not stats.interrupted and stats.fixed_k == python.get("fixed_k", False)
    ours, theirs = stats.to_dict(), cli_stats(*cli)
    assert set(ours) == set(theirs)
    assert {key: ours[key] for key in set(ours) - TIMES} == {key: theirs[key] for key in set(theirs) - TIMES}


def test_notes_in_python_stats(pair):
    """A pair without a drafter decodes plainly and says so in the notes, as --json does."""
    plain = specli.load(target="embedded:tiny-target", device="cpu")
    stats = plain.generate(PROMPT, max_new_tokens=3).stats
    assert stats.strategy == "none" and any("plain decoding" in note for note in stats.notes), stats.notes
    assert pair.generate(PROMPT, max_new_tokens=3).stats.notes == []
