"""`specli bench`: prompt readers, packaged sets, the summary arithmetic, the identity check, and the JSON
of a real run on tiny random pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specli import bench as b
from specli.cli import app
from specli.errors import UsageError

SPEC_BENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "spec_bench" / "question.jsonl"
STRATEGY_KEYS = {
    "strategy", "tokens", "rounds", "drafted", "accepted", "acceptance_rate", "mean_acceptance_length",
    "tokens_per_second", "speedup",
}  # fmt: skip


# --------------------------------------------------------------------------- prompts


@pytest.mark.skipif(not SPEC_BENCH.is_file(), reason="the Spec-Bench sample is not beside the repo")
def test_reads_spec_bench_question_jsonl():
    prompts = b.read_prompts(SPEC_BENCH)
    rows = [json.loads(line) for line in SPEC_BENCH.read_text().splitlines() if line.strip()]
    assert len(prompts) == len(rows)
    assert prompts[0].text == rows[0]["turns"][0] and prompts[0].id == str(rows[0]["question_id"])
    assert {p.category for p in prompts} == {r["category"] for r in rows}


def test_reads_plain_jsonl_and_text(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "a", "category": "x"}\n\n{"text": "b", "id": 7}\n')
    assert [(p.id, p.category, p.text) for p in b.read_prompts(jsonl)] == [
        ("1", "x", "a"),
        ("7", "default", "b"),
    ]
    text = tmp_path / "p.txt"
    text.write_text("first prompt\n\nsecond prompt\n")
    assert [p.text for p in b.read_prompts(text)] == ["first prompt", "second prompt"]


def test_malformed_prompt_file_names_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"question": 3}\n')
    with pytest.raises(UsageError, match=r"bad.jsonl:2"):
        b.read_prompts(bad)


@pytest.mark.parametrize(
    "name,categories",
    [
        ("code", {"completion", "editing", "docstring"}),
        ("chat", {"open_question", "summarization", "extraction", "rewriting", "math", "translation"}),
    ],
)
def test_packaged_sets_have_ten_prompts_per_category(name, categories):
    prompts = b.read_prompts(b.set_path(name))
    assert {p.category for p in prompts} == categories
    for c in categories:
        assert sum(p.category == c for p in prompts) >= 10
    assert len({p.id for p in prompts}) == len(prompts)


def test_select_prompts_filters_limits_and_names_unknown_categories():
    prompts = b.read_prompts(b.set_path("code"))
    picked = b.select_prompts(prompts, ["editing"], 3)
    assert len(picked) == 3 and {p.category for p in picked} == {"editing"}
    with pytest.raises(UsageError, match="completion"):
        b.select_prompts(prompts, ["poetry"])


# --------------------------------------------------------------------------- arithmetic


def m(strategy, prompt="1", tokens=10, rounds=10, drafted=0, accepted=0, elapsed=1.0, draft=0.0, verify=1.0):
    return b.Measurement(
        prompt, "c", strategy, 0, tokens, rounds, drafted, accepted, elapsed, draft, verify,
        [drafted // max(rounds, 1)], [accepted // max(rounds, 1)], [1] * tokens,
    )  # fmt: skip


def test_summary_speedup_costs_and_bound():
    runs = [
        m("none", tokens=100, rounds=100, elapsed=1.0, verify=1.0),
        m("draft", tokens=100, rounds=25, drafted=100, accepted=75, elapsed=0.5, draft=0.2, verify=0.25),
    ]
    s = b.summarize(runs, k=4)["overall"]
    assert s["none"]["speedup"] == 1.0 and s["draft"]["speedup"] == pytest.approx(2.0)
    assert s["draft"]["acceptance_rate"] == 0.75 and s["draft"]["mean_acceptance_length"] == 4.0
    # a plain step costs 0.01 s; a draft token 0.002 s (c = 0.2); a verify 0.01 s (v = 1.0)
    assert s["draft"]["c"] == pytest.approx(0.2) and s["draft"]["v"] == pytest.approx(1.0)
    bound = b.expected_length(0.75, 4) / (4 * 0.2 + 1.0)
    assert s["draft"]["bound"] == pytest.approx(bound)
    assert s["draft"]["efficiency"] == pytest.approx(2.0 / bound)


def test_identity_errors_report_the_first_differing_token():
    base = m("none")
    other = m("lookup")
    other.output = [1, 1, 2] + [1] * 7
    assert b.identity_errors([base, other]) == ["prompt 1: 'lookup' differs from plain decoding at token 2"]
    assert b.identity_errors([base, m("draft")]) == []


# --------------------------------------------------------------------------- a real run


@pytest.fixture(scope="module")
def bench_json(tiny_pair, tmp_path_factory):
    target, draft = tiny_pair
    root = tmp_path_factory.mktemp("bench")
    out, prompts = root / "run.json", root / "prompts.jsonl"
    rows = [
        {"question_id": 1, "category": "completion", "turns": ["def add(a, b):\n"]},
        {"question_id": 2, "category": "completion", "turns": ["class Stack:\n    def push(self, item):"]},
        {
            "question_id": 3,
            "category": "editing",
            "turns": ["x = [1, 2, 3]\nfor i in x:\n    print(i)\n# again\n"],
        },
        {"question_id": 4, "category": "editing", "turns": ["import os\nimport sys\n# again\nimport"]},
        {"question_id": 5, "category": "editing", "turns": ["x = 1\n" * 400]},  # longer than the context
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(target), "--draft", str(draft), "--strategy", "draft",
         "--strategy", "lookup", "--strategy", "self", "--prompts", str(prompts),
         "--max-new-tokens", "12", "--repeats", "2", "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), result.stdout, result.stderr


def test_bench_json_is_consistent(bench_json):
    data, _, _ = bench_json
    assert data["errors"] == []
    for category, per in data["summary"].items():
        assert set(per) == {"none", "draft", "lookup", "self"}, category
        for _name, s in per.items():
            assert set(s) >= STRATEGY_KEYS
            assert s["accepted"] <= s["drafted"]
            assert s["mean_acceptance_length"] * (s["rounds"]) == pytest.approx(s["tokens"], rel=1e-9)
        assert per["none"]["speedup"] == 1.0
    runs = data["runs"]
    assert len(runs) == 4 * 2 * 4  # strategies x repeats x prompts that fit
    assert len(data["skipped"]) == 1 and "prompt 5" in data["skipped"][0]
    env = data["environment"]
    for key in ("specli", "torch", "transformers", "device", "dtype", "quantization", "threads"):
        assert key in env


def test_bench_prints_a_table_per_category(bench_json):
    _, stdout, _ = bench_json
    for title in ("completion", "editing", "overall"):
        assert title in stdout


def test_bench_off_a_terminal_says_how_far_it_is(bench_json):
    """Piped, Rich draws no bar: plain lines on stderr count the prompts (the 4 that fit), none on stdout."""
    _, stdout, stderr = bench_json
    assert "bench: prompts measured: 4/4" in stderr
    assert "prompts measured" not in stdout


def test_bench_reports_a_lossy_strategy_as_an_error(tiny_pair, monkeypatch):
    """If verification were wrong, the greedy identity check must catch it and fail the run."""
    import specli.engine as engine
    from specli.verify import Verdict

    def accept_everything(draft_ids, logits):
        k = draft_ids.shape[0]
        drafted = draft_ids.tolist()
        return Verdict(k, int(logits[k].argmax()), drafted, [1.0] * k, [], target_argmax=[0] * (k + 1))

    monkeypatch.setattr(engine, "verify_greedy", accept_everything)
    target, draft = tiny_pair
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(target), "--draft", str(draft), "--limit", "1", "--max-new-tokens", "12"],
    )
    assert result.exit_code == 1
    assert "differs from plain decoding" in result.stdout


def test_compare_hf_times_transformers_modes(tiny_pair, tmp_path):
    target, draft = tiny_pair
    prompts = tmp_path / "p.txt"
    prompts.write_text("def add(a, b):\n")
    out = tmp_path / "run.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(target), "--draft", str(draft), "--strategy", "draft",
         "--strategy", "lookup", "--prompts", str(prompts), "--max-new-tokens", "8", "--compare-hf",
         "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    hf = json.loads(out.read_text())["transformers"]
    assert {"plain", "assisted", "assisted (transformers defaults)", "prompt lookup"} <= set(hf)
    for mode in ("plain", "assisted", "prompt lookup"):
        assert hf[mode]["tokens"] > 0 and hf[mode]["tokens_per_second"] > 0, hf[mode]
    assert "specli / transformers" in result.stdout
