"""`specli bench`: prompt readers, packaged sets, the summary arithmetic, the identity check, and the JSON
of a real run on tiny random pairs."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from specli.bench import prompts as prompt_sets
from specli.bench import run as b
from specli.cli import app
from specli.engine.events import Stats, expected_acceptance_length
from specli.errors import UsageError
from specli.settings import resolve_settings
from specli.strategies import LOOKUP_DRAFT_TOKENS

SPEC_BENCH = (
    Path(__file__).resolve().parents[1] / "data" / "spec_bench" / "question.jsonl"
)  # 13 lines, Apache-2.0
STRATEGY_KEYS = {
    "strategy", "tokens", "rounds", "drafted", "accepted", "rejections", "acceptance_rate", "accept_prob",
    "mean_acceptance_length", "tokens_per_second", "speedup", "c", "v", "bound", "efficiency",
}  # fmt: skip
SETTINGS_KEYS = {
    "max_new_tokens", "num_draft_tokens", "temperature", "seed", "repeats", "warmup", "top_k", "top_p",
    "min_p", "exit_layer", "ngram_min", "ngram_max", "sweep_k", "fixed_k", "num_draft_tokens_by_strategy",
    "tree", "tree_width", "sweep_tree", "ignore_eos",
}  # fmt: skip
RUN_KEYS = {
    "prompt_id", "category", "strategy", "repeat", "tokens", "rounds", "drafted", "accepted", "rejections",
    "elapsed_s", "draft_time_s", "verify_time_s", "position_drafted", "position_accepted", "output_tokens",
    "num_draft_tokens", "position_judged", "prefill_time_s", "compiled", "tree", "tree_width",
    "nodes_per_round", "engine",
}  # fmt: skip


# --------------------------------------------------------------------------- prompts


def test_reads_spec_bench_question_jsonl():
    """Spec-Bench's own file (a verbatim excerpt): first turns, question ids and all 13 categories."""
    prompts = prompt_sets.read_prompts(SPEC_BENCH)
    rows = [json.loads(line) for line in SPEC_BENCH.read_text().splitlines() if line.strip()]
    assert len(prompts) == len(rows) == 13
    assert [p.text for p in prompts] == [r["turns"][0] for r in rows]
    assert [p.id for p in prompts] == [str(r["question_id"]) for r in rows]
    assert [p.category for p in prompts] == [r["category"] for r in rows]
    assert len({p.category for p in prompts}) == 13 and prompts[0].id == "81"


def test_reads_plain_jsonl_and_text(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"prompt": "a", "category": "x"}\n\n{"text": "b", "id": 7}\n')
    assert [(p.id, p.category, p.text) for p in prompt_sets.read_prompts(jsonl)] == [
        ("1", "x", "a"),
        ("7", "default", "b"),
    ]
    text = tmp_path / "p.txt"
    text.write_text("first prompt\n\nsecond prompt\n")
    assert [p.text for p in prompt_sets.read_prompts(text)] == ["first prompt", "second prompt"]


def test_malformed_prompt_file_names_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"question": 3}\n')
    with pytest.raises(UsageError, match=r"bad.jsonl:2"):
        prompt_sets.read_prompts(bad)


@pytest.mark.parametrize(
    "name,categories",
    [
        ("code", {"completion", "editing", "docstring"}),
        ("chat", {"open_question", "summarization", "extraction", "rewriting", "math", "translation"}),
    ],
)
def test_packaged_sets_have_ten_prompts_per_category(name, categories):
    prompts = prompt_sets.read_prompts(prompt_sets.set_path(name))
    assert {p.category for p in prompts} == categories
    for c in categories:
        assert sum(p.category == c for p in prompts) >= 10
    assert len({p.id for p in prompts}) == len(prompts)


def test_select_prompts_filters_limits_and_names_unknown_categories():
    prompts = prompt_sets.read_prompts(prompt_sets.set_path("code"))
    picked = prompt_sets.select_prompts(prompts, ["editing"], 3)
    assert len(picked) == 3 and {p.category for p in picked} == {"editing"}
    with pytest.raises(UsageError, match="completion"):
        prompt_sets.select_prompts(prompts, ["poetry"])


# --------------------------------------------------------------------------- arithmetic


def m(strategy, prompt="1", tokens=10, rounds=10, drafted=0, accepted=0, rejections=0, elapsed=1.0,
      draft=0.0, verify=1.0, repeat=0):  # fmt: skip
    stats = Stats(
        rounds=rounds, drafted=drafted, accepted=accepted, rejections=rejections, tokens=tokens,
        drafts=rounds if drafted else 0,
        draft_time=draft, verify_time=verify, position_drafted=[rounds] * (drafted // max(rounds, 1)),
        position_accepted=([accepted // max(rounds, 1)] + [0] * (drafted // max(rounds, 1) - 1))[
            : drafted // max(rounds, 1)
        ],
    )  # every round drafted drafted // rounds  # fmt: skip
    return b.Measurement(prompt, "c", strategy, repeat, elapsed, stats, [1] * tokens)


def test_summary_speedup_costs_and_bound():
    """The bound and efficiency use α = accepted / (accepted + rejections), not accepted / drafted."""
    runs = [
        m("none", tokens=100, rounds=100, elapsed=1.0, verify=1.0),
        m("draft", tokens=100, rounds=25, drafted=100, accepted=75, rejections=15, elapsed=0.5, draft=0.2,
          verify=0.25),
    ]  # fmt: skip
    s = b.summarize(runs, k=4)["overall"]
    assert s["none"]["speedup"] == 1.0 and s["draft"]["speedup"] == pytest.approx(2.0)
    assert s["draft"]["acceptance_rate"] == 0.75 and s["draft"]["mean_acceptance_length"] == 4.0
    assert s["draft"]["rejections"] == 15 and s["draft"]["accept_prob"] == pytest.approx(75 / 90)
    # a plain step costs 0.01 s; a draft token 0.002 s (c = 0.2); a verify 0.01 s (v = 1.0)
    assert s["draft"]["c"] == pytest.approx(0.2) and s["draft"]["v"] == pytest.approx(1.0)
    bound = expected_acceptance_length(75 / 90, 4) / (4 * 0.2 + 1.0)
    assert s["draft"]["bound"] == pytest.approx(bound)
    assert s["draft"]["efficiency"] == pytest.approx(2.0 / bound)


def test_bound_takes_E_at_each_rounds_own_k():
    """k chosen per round: 10 rounds drafted 2 and 10 drafted 4 (mean k 3). The bound is the mean of
    E(α, 2) and E(α, 4) over 3·c + v, not E(α, 4) over 4·c + v."""
    stats = Stats(
        rounds=20, drafts=20, drafted=60, accepted=40, rejections=10, tokens=60, draft_time=0.12,
        verify_time=0.2,
        position_drafted=[20, 20, 10, 10], position_accepted=[15, 12, 8, 5], position_judged=[20, 15, 8, 7],
    )  # fmt: skip
    assert stats.rounds_by_drafted == [0, 0, 10, 0, 10]
    runs = [m("none", tokens=100, rounds=100, elapsed=1.0), m("draft", elapsed=0.5)]
    runs[1].stats = stats
    s = b.summarize(runs, k=4)["overall"]["draft"]
    alpha = 40 / 50
    c, v = 0.12 / 60 / 0.01, 0.2 / 20 / 0.01  # in plain steps of 0.01 s
    assert s["c"] == pytest.approx(c) and s["v"] == pytest.approx(v)
    expected = (expected_acceptance_length(alpha, 2) + expected_acceptance_length(alpha, 4)) / 2
    assert s["expected_tokens_per_round"] == pytest.approx(expected)
    assert s["bound"] == pytest.approx(expected / (3 * c + v))


def test_no_efficiency_for_a_row_whose_runs_compiled():
    """A timed run during which torch.compile built a graph is not steady state: its row keeps its
    speed but gets no efficiency, and the view says why."""
    runs = [
        m("none", tokens=100, rounds=100, elapsed=1.0),
        m("draft", tokens=100, rounds=25, drafted=100, accepted=75, rejections=15, elapsed=0.5, draft=0.2,
          verify=0.25),
        m("lookup", tokens=100, rounds=25, drafted=100, accepted=75, rejections=15, elapsed=0.5, draft=0.2,
          verify=0.25),
    ]  # fmt: skip
    runs[1].compiled = True
    s = b.summarize(runs, k=4)["overall"]
    assert s["draft"]["compiled_runs"] == 1 and s["draft"]["efficiency"] is None
    assert s["draft"]["speedup"] == pytest.approx(2.0) and s["draft"]["bound"] is not None
    assert s["lookup"]["efficiency"] is not None
    from specli.render.bench import compiled_rows

    assert compiled_rows(s) == ["draft (1 run)"]
    assert runs[1].to_dict()["compiled"] is True


def test_summary_takes_speed_from_median_runs_and_acceptance_from_all():
    runs = [
        m("none", tokens=100, rounds=100, elapsed=1.0, repeat=0),
        m("none", tokens=100, rounds=100, elapsed=3.0, repeat=1),
        m("none", tokens=100, rounds=100, elapsed=2.0, repeat=2),
        m("draft", tokens=100, rounds=25, drafted=100, accepted=60, rejections=20, elapsed=0.5, repeat=0),
        m("draft", tokens=100, rounds=50, drafted=200, accepted=80, rejections=40, elapsed=0.9, repeat=1),
    ]
    s = b.summarize(runs, k=4)["overall"]
    assert s["none"]["tokens_per_second"] == pytest.approx(50.0)  # the median run: 2 s
    assert s["draft"]["tokens_per_second"] == pytest.approx(200.0)  # the lower median of two: 0.5 s
    assert s["draft"]["acceptance_rate"] == pytest.approx(140 / 300)
    assert s["draft"]["accept_prob"] == pytest.approx(140 / 200)
    assert s["draft"]["mean_acceptance_length"] == pytest.approx(200 / 75)


def test_report_settings_and_runs_keep_their_flat_keys():
    settings = resolve_settings(max_new_tokens=12, num_draft_tokens=3, temperature=0.5, top_k=7, seed=4)
    bench = b.BenchSettings(settings, repeats=2, warmup=0)
    runs = [m("none"), m("draft", drafted=8, accepted=5, rejections=2)]
    data = b.report(runs, bench, {}, None)
    assert set(data) == {
        "settings", "environment", "summary", "sweep", "errors", "skipped", "transformers", "runs"
    }  # fmt: skip
    assert set(data["settings"]) == SETTINGS_KEYS
    assert data["settings"] | {"repeats": 2, "warmup": 0} == data["settings"]
    assert (data["settings"]["seed"], data["settings"]["top_k"], data["settings"]["temperature"]) == (
        4,
        7,
        0.5,
    )
    assert all(set(row) == RUN_KEYS for row in data["runs"])
    assert data["runs"][1]["rejections"] == 2 and data["runs"][1]["output_tokens"] == 10
    assert b.BenchSettings(resolve_settings()).to_dict()["seed"] == 0  # repeat r runs seed 0 + r


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
    k = data["settings"]["num_draft_tokens"]
    for category, per in data["summary"].items():
        assert set(per) == {"none", "draft", "lookup", "self"}, category
        for _name, s in per.items():
            assert set(s) >= STRATEGY_KEYS
            assert s["accepted"] <= s["drafted"]
            assert s["accepted"] + s["rejections"] <= s["drafted"]
            assert s["acceptance_rate"] <= s["accept_prob"]
            assert s["mean_acceptance_length"] * (s["rounds"]) == pytest.approx(s["tokens"], rel=1e-9)
            if s["bound"] is not None:
                cost = s["drafted"] / s["rounds"] * s["c"] + s["v"]  # each round at its own k
                assert s["bound"] == pytest.approx(s["expected_tokens_per_round"] / cost)
                assert (
                    1.0 <= s["expected_tokens_per_round"] <= expected_acceptance_length(s["accept_prob"], k)
                )
        assert per["none"]["speedup"] == 1.0
        for s in per.values():  # the prompt's forward is its own share, not "other"
            assert s["prefill_time_s"] > 0 and s["other_time_s"] >= 0
            parts = s["draft_time_s"] + s["verify_time_s"] + s["prefill_time_s"]
            assert parts <= s["elapsed_s"] * 1.0001
    assert set(data["settings"]) == SETTINGS_KEYS
    runs = data["runs"]
    assert all(set(row) == RUN_KEYS for row in runs)
    assert len(runs) == 4 * 2 * 4  # strategies x repeats x prompts that fit
    assert len(data["skipped"]) == 1 and "prompt 5" in data["skipped"][0]
    env = data["environment"]
    for key in ("specli", "torch", "transformers", "device", "dtype", "quantization", "threads"):
        assert key in env


def test_bench_prints_a_table_per_category(bench_json):
    _, stdout, _ = bench_json
    for title in ("completion", "editing", "overall"):
        assert title in stdout
    assert "acc. rate" in stdout and "α" in stdout and "accepted/(accepted + rejections)" in stdout


def test_bench_off_a_terminal_says_how_far_it_is(bench_json):
    """Bug: piped, loading and warm-up were silent and only prompts were counted. Now every stage has a
    line with its count (4 strategies with the baseline, the 4 prompts that fit, 2 repeats), progress
    lines with the time left, and the time it took; nothing of it on stdout."""
    _, stdout, stderr = bench_json
    lines = stderr.splitlines()
    assert lines.index("bench: loading models…") < lines.index("bench: warm-up (not counted): 4 runs")
    assert any(line.startswith("bench: models loaded in ") for line in lines), stderr
    assert "bench: warm-up (not counted): 4/4 runs · took " in stderr
    stage = "bench: measuring 4 prompts × 4 strategies × 2 repeats"
    assert f"{stage}: 32 runs, about " in stderr  # estimated from the warm-up before the first run
    assert re.search(rf"{stage}: 16/32 runs · about \d+:\d\d left", stderr), stderr
    assert f"{stage}: 32/32 runs · took " in stderr
    assert "bench:" not in stdout


def test_bench_reports_a_lossy_strategy_as_an_error(tiny_pair, monkeypatch):
    """If verification were wrong, the greedy identity check must catch it and fail the run."""
    import specli.engine.verify as verify
    from specli.engine.verify import Verdict

    def accept_everything(draft_ids, logits):
        k = draft_ids.shape[0]
        drafted = draft_ids.tolist()
        return Verdict(k, int(logits[k].argmax()), drafted, [1.0] * k, [], target_argmax=[0] * (k + 1))

    monkeypatch.setattr(verify, "verify_greedy", accept_everything)  # what verify() calls when greedy
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
        assert hf[mode]["by_category"] == {"default": {k: hf[mode][k] for k in ("tokens", "elapsed_s",
                                                       "tokens_per_second")}}  # fmt: skip
    assert "specli / transformers" in result.stdout
    # transformers' runs take turns with specli's (drift hits both alike), counted in the same stage
    stage = "bench: measuring 1 prompt × 3 strategies (+ 6 transformers modes) × 1 repeat"
    assert f"{stage}: 9/9 runs · took " in result.stderr, result.stderr
    data = json.loads(out.read_text())
    assert {r["strategy"] for r in data["runs"]} == {"none", "draft", "lookup"}  # its own runs only
    # without -k each strategy runs at its own most drafts per round: lookup's (torch engine), the pair's
    # 4 for draft; transformers' prompt lookup at that k, at 16 and at its docs' 10
    assert data["settings"]["num_draft_tokens"] == 4
    assert data["settings"]["num_draft_tokens_by_strategy"] == {"lookup": LOOKUP_DRAFT_TOKENS}
    assert f"(lookup: {LOOKUP_DRAFT_TOKENS})" in result.stdout
    assert {"prompt lookup (16 tokens)", "prompt lookup (transformers docs: 10 tokens)"} <= set(hf)


def test_transformers_comparison_uses_the_same_settings():
    """Sampling settings reach transformers' generate() as set (no forced top-k/top-p), with the bench's
    k, n-gram size and the exit layer Settings holds."""
    calls = []

    def config() -> SimpleNamespace:
        return SimpleNamespace(
            num_assistant_tokens=None, num_assistant_tokens_schedule=None, assistant_confidence_threshold=None
        )

    def generate(ids, **kwargs):
        """Records the arguments and what the drafting model's generation_config holds during the call
        (where transformers reads the assisted settings from)."""
        drafting = kwargs.get("assistant_model") or (target if "assistant_early_exit" in kwargs else None)
        held = vars(drafting.generation_config) if drafting is not None else {}
        calls.append(kwargs | {k: v for k, v in held.items() if v is not None})
        return torch.cat([ids, torch.zeros(1, kwargs["max_new_tokens"], dtype=ids.dtype)], dim=1)

    target = SimpleNamespace(generate=generate, generation_config=config())
    pair = SimpleNamespace(
        target_model=target, target=SimpleNamespace(device=torch.device("cpu")),
        draft_model=SimpleNamespace(generation_config=config()), tokenizer=SimpleNamespace(pad_token_id=0),
        eos_ids={0},
    )  # fmt: skip
    settings = resolve_settings(
        max_new_tokens=6, num_draft_tokens=3, temperature=0.7, top_k=20, top_p=0.9, ngram_max=2, exit_layer=2
    )
    bench = b.BenchSettings(settings, repeats=1, warmup=0)
    hf = b.run_transformers(
        pair, [(prompt_sets.BenchPrompt("1", "c", "x"), [5, 6])], ["draft", "lookup", "self"], bench
    )
    assert set(hf) == {
        "plain", "assisted", "assisted (transformers defaults)", "prompt lookup",
        "prompt lookup (16 tokens)", "prompt lookup (transformers docs: 10 tokens)", "early exit",
        "early exit (transformers defaults)",
    }  # fmt: skip
    assert all(hf[mode]["tokens"] == 6 for mode in hf), hf
    for kwargs in calls:
        assert kwargs["do_sample"] is True and kwargs["max_new_tokens"] == 6
        assert (kwargs["temperature"], kwargs["top_k"], kwargs["top_p"]) == (0.7, 20, 0.9)
    by_mode = dict(zip(hf, calls, strict=True))
    assert by_mode["assisted"]["num_assistant_tokens"] == 3
    assert by_mode["prompt lookup"]["max_matching_ngram_size"] == 2
    assert by_mode["early exit"]["assistant_early_exit"] == 2
    assert by_mode["early exit"]["num_assistant_tokens"] == 3
    assert by_mode["prompt lookup (transformers docs: 10 tokens)"]["prompt_lookup_num_tokens"] == 10
    assert by_mode["prompt lookup (16 tokens)"]["prompt_lookup_num_tokens"] == 16
    assert by_mode["prompt lookup (16 tokens)"]["max_matching_ngram_size"] == 2
    defaults = by_mode["early exit (transformers defaults)"]
    assert defaults["assistant_early_exit"] == 2 and "num_assistant_tokens" not in defaults
    calls.clear()  # each mode at its own strategy's k: lookup's default 16, the drafter's 3
    own = {"lookup": settings.replace(num_draft_tokens=16)}
    b.run_transformers(
        pair,
        [(prompt_sets.BenchPrompt("1", "c", "x"), [5, 6])],
        ["draft", "lookup"],
        b.BenchSettings(settings, by_strategy=own),
    )
    by_mode = dict(zip(b.transformers_modes(pair, ["draft", "lookup"], settings, own), calls, strict=True))
    assert by_mode["assisted"]["num_assistant_tokens"] == 3
    assert by_mode["prompt lookup"]["prompt_lookup_num_tokens"] == 16
    calls.clear()
    b.run_transformers(
        pair,
        [(prompt_sets.BenchPrompt("1", "c", "x"), [5, 6])],
        [],
        b.BenchSettings(settings.replace(temperature=0)),
    )
    assert calls[0]["do_sample"] is False and "top_k" not in calls[0]
    assert "eos_token_id" not in calls[0] and "min_p" not in calls[0]
    calls.clear()  # --ignore-eos: transformers is told no EOS ends it; a min-p reaches it as set
    b.run_transformers(
        pair,
        [(prompt_sets.BenchPrompt("1", "c", "x"), [5, 6])],
        [],
        b.BenchSettings(settings.replace(ignore_eos=True, min_p=0.1)),
    )
    assert "eos_token_id" in calls[0] and calls[0]["eos_token_id"] is None and calls[0]["min_p"] == 0.1


def test_ignore_eos_runs_every_strategy_to_max_new_tokens(tokenizer, tmp_path):
    """A target whose EOS is its first greedy token: a bench stops every run there, --ignore-eos runs
    each to --max-new-tokens (and says so in the report's settings)."""
    from conftest import make_model, save_model

    import specli

    model = make_model("llama", len(tokenizer), layers=2, seed=1, eos_token_id=None)
    prompt = "def add(a, b):\n"
    first = specli.load(target=str(save_model(tmp_path / "m", model, tokenizer)), strategy="none").generate(
        prompt, max_new_tokens=1, chat=False
    )
    model.config.eos_token_id = model.generation_config.eos_token_id = first.token_ids[0]
    target = save_model(tmp_path / "t", model, tokenizer)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "c", "turns": [prompt]}) + "\n")
    reports = {}
    for flag in ([], ["--ignore-eos"]):
        out = tmp_path / f"r{len(flag)}.json"
        result = CliRunner().invoke(
            app,
            ["bench", "--target", str(target), "--strategy", "lookup", "--prompts", str(prompts),
             "--max-new-tokens", "9", "--warmup", "0", "--no-chat", "--json", str(out), *flag],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        reports[bool(flag)] = json.loads(out.read_text())
    assert {r["tokens"] for r in reports[False]["runs"]} == {1}
    assert {r["tokens"] for r in reports[True]["runs"]} == {9}
    assert [reports[flag]["settings"]["ignore_eos"] for flag in (False, True)] == [False, True]


# --------------------------------------------------------------------------- k sweep


def test_parse_sweep():
    from specli.cli import parse_sweep

    assert parse_sweep("2-5") == (2, 3, 4, 5)
    assert parse_sweep("8,2,4,4") == (2, 4, 8)
    for bad in ("0-3", "a", "2-", "", "3-1"):
        with pytest.raises(UsageError):
            parse_sweep(bad)


@pytest.mark.parametrize(
    ("text", "named"), [("0,2,4", "k 0 is"), ("0-3", "k 0 is"), ("-1,0,2", "k -1, 0 are"), ("0", "k 0 is")]
)
def test_sweep_k_names_the_k_out_of_range(text, named):
    """Bug caught (issue 28 #16): '--sweep-k 0,2,4 names no k >= 1', which it does (2 and 4)."""
    from specli.cli import parse_sweep

    with pytest.raises(UsageError) as info:
        parse_sweep(text)
    assert info.value.message == f"--sweep-k '{text}': {named} out of range."
    assert "from 1 to" in (info.value.hint or "")
    result = CliRunner().invoke(app, ["bench", "--sweep-k", text])
    assert result.exit_code == 2 and f"{named} out of range" in result.stderr


def test_sweep_runs_every_strategy_at_each_k(tiny_pair, tmp_path):
    """--sweep-k 1,3: draft and lookup at k=1 and k=3 beside one plain baseline; every greedy run equals
    plain decoding; the sweep table lines up draft time per round against k and α by depth."""
    target, draft = tiny_pair
    prompts = tmp_path / "p.txt"
    prompts.write_text("def add(a, b):\nclass Stack:\n")
    out = tmp_path / "sweep.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--target", str(target), "--draft", str(draft), "--strategy", "draft",
         "--strategy", "lookup", "--prompts", str(prompts), "--max-new-tokens", "16",
         "--sweep-k", "1,3", "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["errors"] == [] and data["settings"]["sweep_k"] == [1, 3]
    labels = {"none", "draft k=1", "draft k=3", "lookup k=1", "lookup k=3"}
    assert set(data["summary"]["overall"]) == labels
    assert {r["num_draft_tokens"] for r in data["runs"] if r["strategy"] == "draft"} == {1, 3}
    assert all(len(r["position_drafted"]) <= r["num_draft_tokens"] for r in data["runs"] if r["drafted"])
    rows = data["sweep"]["draft"]
    assert [row["k"] for row in rows] == [1, 3]
    assert rows[0]["draft_cost_vs_first"] == 1.0
    summary = data["summary"]["overall"]["draft k=3"]
    assert rows[1]["tokens_per_second"] == summary["tokens_per_second"]
    assert rows[1]["draft_ms_per_round"] == pytest.approx(1000 * summary["draft_time_s"] / summary["rounds"])
    assert len(rows[1]["per_position_accept_prob"]) == 3
    assert "draft across k" in result.stdout and "α by position" in result.stdout
    both = CliRunner().invoke(app, ["bench", "--sweep-k", "2-4", "-k", "3"])
    assert both.exit_code == 2 and "not both" in both.output


# --------------------------------------------------------------------------- the printed tables


def swept(strategy, k, judged, accepted, rounds=10):
    """A run of a k sweep whose positions were judged and kept as given (one draft judged per round at
    position 1; a later position only after the ones before it were kept)."""
    stats = Stats(
        rounds=rounds, drafts=rounds, drafted=k * rounds, accepted=sum(accepted),
        rejections=rounds - accepted[-1], tokens=rounds + sum(accepted), verify_time=1.0,
        position_drafted=[rounds] * k, position_accepted=accepted, position_judged=judged,
    )  # fmt: skip
    return b.Measurement("1", "c", strategy, 0, 1.0, stats, [1] * 10, num_draft_tokens=k)


def printed(report, width=240) -> str:
    from rich.console import Console

    from specli.render.bench import bench_view

    console = Console(record=True, file=io.StringIO(), width=width)
    console.print(bench_view(report))
    return console.export_text()


ENV = {"device": "cpu", "dtype": "float32", "quantization": "none", "threads": 1}


def test_sweep_prints_a_dash_for_draft_positions_never_judged():
    """Bug: `bench --sweep-k` printed 0.00 as α of a draft position no round ever judged (every round
    was refused earlier): a rate of nothing. Those positions now show "–"; a judged position refused
    every time still shows 0.00."""
    settings = resolve_settings(num_draft_tokens=3)
    runs = [
        b.Measurement("1", "c", "none", 0, 1.0, Stats(rounds=10, tokens=10, verify_time=1.0), [1] * 10),
        swept("draft", 1, judged=[10], accepted=[4]),
        swept("draft", 3, judged=[10, 0, 0], accepted=[0, 0, 0]),  # position 1 always refused
    ]
    text = printed(b.report(runs, b.BenchSettings(settings, ks=(1, 3)), ENV, None))
    cells = [line.split("│") for line in text.split("draft across k")[1].splitlines() if line.startswith("│")]
    by_position = {row[1].strip(): row[-2].strip() for row in cells}  # k -> its "α by position" cell
    assert by_position == {"1": "0.40", "3": "0.00 – –"}, text


@pytest.mark.parametrize(
    ("fixed", "ks", "words"),
    [
        (True, (), "fixed k=4 ·"),
        (False, (), "k ≤ 4, chosen per round ·"),
        (False, (2, 4), "k=2,4 (sweep, fixed"),
    ],
)
def test_bench_footer_says_how_k_was_chosen(fixed, ks, words):
    """Bug: with --fixed-k the footer said "k=4", the same as when each round chose its k up to 4."""
    settings = resolve_settings(num_draft_tokens=4, fixed_k=fixed)
    runs = [b.Measurement("1", "c", "none", 0, 1.0, Stats(rounds=10, tokens=10, verify_time=1.0), [1] * 10)]
    report = b.report(runs, b.BenchSettings(settings, ks=ks), ENV, None)
    assert report["settings"]["fixed_k"] is fixed
    footer = printed(report)
    assert words in footer, footer
    assert ("fixed k=4" in footer) is fixed


# --------------------------------------------------------------------------- beside servers


def test_local_rows_carry_the_figures_servers_report():
    """Local rows carry vLLM's figures so they sit beside a server's: drafts = rounds that drafted (4 of
    the 5: the last, which the budget left no draft, is not one), acceptance length = 1 + accepted / drafts
    (not τ = tokens / rounds), per-position acceptance over drafts; TTFT, TPOT and ITL from the times
    of the rounds that committed."""
    stats = Stats(
        rounds=5, drafts=4, drafted=12, accepted=8, rejections=2, tokens=13, verify_time=1.0,
        position_drafted=[4, 4, 4], position_accepted=[4, 3, 1], position_judged=[4, 4, 3],
    )  # fmt: skip
    run = b.Measurement(
        "1", "c", "draft", 0, 1.0, stats, [1] * 13, ttft_s=0.2, chunk_gaps=[0.1, 0.2, 0.3, 0.2]
    )
    summary = b.summarize([m("none"), run], k=3)["overall"]
    s = summary["draft"]
    assert (s["drafts"], s["draft_tokens"], s["accepted_tokens"]) == (4, 12, 8)
    assert s["acceptance_length"] == pytest.approx(3.0) and s["mean_acceptance_length"] == pytest.approx(
        13 / 5
    )
    assert s["acceptance_rate"] == pytest.approx(8 / 12)
    assert s["accepted_per_position"] == [4, 3, 1]
    assert s["per_position_acceptance_rate"] == pytest.approx([1.0, 0.75, 0.25])
    assert s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["mean_tpot_ms"] == pytest.approx(1000 * 0.8 / 12)
    assert (s["mean_itl_ms"], s["median_itl_ms"]) == (pytest.approx(200.0), pytest.approx(200.0))
    plain = summary["none"]
    assert plain["drafts"] == 0 and plain["acceptance_length"] is None and plain["acceptance_rate"] == 0.0


@dataclass
class FakeRemote:
    """A server's turns in the rotation (specli.bench.run.Remote), recorded; it fails at call `fail_at`."""

    label: str
    fail_at: int | None = None
    calls: list = field(default_factory=list)
    error: str | None = None

    def run(self, prompt, repeat, warm_up):
        self.calls.append((prompt.id, repeat, warm_up))
        if self.fail_at is not None and len(self.calls) >= self.fail_at:
            self.error = f"endpoint {self.label}: gone"


def test_servers_take_turns_with_the_same_warm_up_and_repeats():
    """Without a local pair only the remotes run: warm-up on the first prompt, then every prompt ×
    repeat; one that fails is not called again and the others go on."""
    prompts = [(prompt_sets.BenchPrompt(i, "c", "x"), []) for i in ("1", "2")]
    good, bad = FakeRemote("good"), FakeRemote("bad", fail_at=2)
    bench = b.BenchSettings(resolve_settings(), repeats=2, warmup=1)
    assert b.run_bench(None, prompts, ["draft"], bench, remotes=[good, bad]) == []
    assert good.calls == [("1", 0, True), ("1", 0, False), ("1", 1, False), ("2", 0, False), ("2", 1, False)]
    assert bad.calls == [("1", 0, True), ("1", 0, False)]


def test_each_strategy_measures_at_its_own_k(tiny_pair, monkeypatch):
    """measure() runs a strategy with its own settings when the bench holds them (lookup's default k of
    32 on the torch engine beside a drafter's 4), else the shared ones."""
    import specli

    pair = specli.load(
        target=str(tiny_pair[0]), draft=str(tiny_pair[1]), strategy=["draft", "lookup"], device="cpu"
    )
    seen = []
    real = pair.stream
    monkeypatch.setattr(pair, "stream", lambda **kw: seen.append(kw["settings"]) or real(**kw))
    shared = pair.settings(max_new_tokens=4)
    bench = b.BenchSettings(
        shared, by_strategy={"lookup": pair.settings(max_new_tokens=4, strategy="lookup")}
    )
    prompt = prompt_sets.BenchPrompt("1", "c", "def f():")
    ids = pair.encode(prompt.text, chat=False)
    for strategy in ("draft", "lookup", "none"):
        b.measure(pair, prompt, ids, strategy, bench, 0)
    assert [(s.strategy, s.num_draft_tokens) for s in seen] == [("draft", 4), ("lookup", 32), ("none", 4)]


def test_assisted_modes_reach_transformers_candidate_generator(tiny_pair, monkeypatch):
    """transformers 5.24 reads num_assistant_tokens and the confidence threshold from the drafting
    model's generation_config, not from generate()'s arguments: the same-k modes must arrive there (k,
    constant, no threshold), the defaults modes must see transformers' own (20 and 0.4), and no mode may
    leave its settings behind on the models. Catches passing them as generate() arguments only."""
    from transformers.generation import candidate_generator

    import specli

    seen = []
    real = candidate_generator.AssistedCandidateGenerator.get_candidates

    def spy(self, *args, **kwargs):
        seen.append((self.num_assistant_tokens, self.assistant_confidence_threshold))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(candidate_generator.AssistedCandidateGenerator, "get_candidates", spy)
    pair = specli.load(target=str(tiny_pair[0]), draft=str(tiny_pair[1]), device="cpu", threads=None)
    settings = pair.settings(max_new_tokens=6, num_draft_tokens=3, exit_layer=1)
    ids = pair.encode("def add(a, b):", chat=False)
    modes = b.transformers_modes(pair, ["draft", "self"], settings)
    got = {}
    for name in (
        "assisted",
        "assisted (transformers defaults)",
        "early exit",
        "early exit (transformers defaults)",
    ):
        seen.clear()
        b.transformers_generate(pair, ids, modes[name], settings, 0)
        got[name] = set(seen)
    assert got == {
        "assisted": {(3, 0.0)},
        "assisted (transformers defaults)": {(20, 0.4)},
        "early exit": {(3, 0.0)},
        "early exit (transformers defaults)": {(20, 0.4)},
    }
    for model in (pair.draft_model, pair.target_model):
        assert model.generation_config.num_assistant_tokens is None  # restored after each mode


def test_transformers_table_pairs_every_mode_with_its_strategy():
    """Same-k and out-of-the-box modes alike compare with the strategy of their kind."""
    from rich.console import Console

    from specli.render.bench import transformers_table

    hf = {
        "plain": {"tokens_per_second": 100.0},
        "assisted": {"tokens_per_second": 150.0},
        "assisted (transformers defaults)": {"tokens_per_second": 120.0},
        "prompt lookup (transformers docs: 10 tokens)": {"tokens_per_second": 200.0},
        "early exit (transformers defaults)": {"tokens_per_second": 90.0},
    }
    console = Console(record=True, width=150, file=io.StringIO())
    console.print(transformers_table(hf, {"none": 100.0, "draft": 300.0, "lookup": 220.0, "self": 135.0}))
    cells = [line.split("│") for line in console.export_text().splitlines() if line.count("│") == 4]
    rows = {cell[1].strip(): cell[3].strip() for cell in cells}
    assert rows == {
        "plain": "1.00× (none)",
        "assisted": "2.00× (draft)",
        "assisted (transformers defaults)": "2.50× (draft)",
        "prompt lookup (transformers docs: 10 tokens)": "1.10× (lookup)",
        "early exit (transformers defaults)": "1.50× (self)",
    }
