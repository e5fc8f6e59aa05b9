"""Token trees' settings, end to end (issue 32): `tree` / `tree_width` from a preset, the command line
(--tree, --tree-width), `specli.load` and per-call overrides into `Settings`; a tree with a strategy that
drafts chains only (self) refused in one line (exit 2, before torch); bench's --sweep-tree (its parsing,
its rows "STRATEGY tree N", the skipped strategies) and the tree keys of its JSON and tables. These check
the plumbing, not what a tree does to generation (tests/engine/test_tree*.py)."""

from __future__ import annotations

import io
import json
import textwrap
from types import SimpleNamespace

import pytest
from conftest import run_cli_cases
from typer.testing import CliRunner

from specli.bench import run as b
from specli.cli import app
from specli.cli.bench import parse_sweep_tree
from specli.cli.options import GenerationOptions, ModelOptions, check_before_loading
from specli.engine.events import Stats
from specli.errors import PresetError, UsageError
from specli.presets import load_preset_file
from specli.settings import resolve_settings

SELF_REFUSED = (
    "strategy 'self' drafts chains only (it drafts inside the target's own layers); drop --tree, or use "
    "--strategy draft, lookup, eagle or heads."
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECLI_PRESETS", str(tmp_path / "no-user-presets"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SPECLI_DEBUG", raising=False)


# --------------------------------------------------------------------------- settings


def test_a_tree_with_self_is_refused_in_one_line():
    with pytest.raises(UsageError) as info:
        resolve_settings(strategy="self", tree=8)
    assert str(info.value) == SELF_REFUSED  # one line: no hint under it
    with pytest.raises(UsageError, match="drafts chains only"):  # a replace validates again
        resolve_settings(strategy="draft", tree=8).replace(strategy="self")
    assert resolve_settings(strategy="self", tree=0).tree == 0  # a chain is fine


@pytest.mark.parametrize("strategy", ["draft", "lookup", "eagle", "heads"])
def test_strategies_that_draft_trees_keep_them(strategy):
    settings = resolve_settings(strategy=strategy, tree=16, tree_width=3)
    assert (settings.tree, settings.tree_width, settings.drafts_tree) == (16, 3, True)
    assert settings.to_dict()["tree"] == 16


def test_plain_decoding_ignores_a_tree():
    settings = resolve_settings(strategy="none", tree=16)
    assert settings.tree == 16 and not settings.drafts_tree
    assert not resolve_settings(strategy="draft").drafts_tree  # the default is a chain


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tree": 65}, "tree must be between 0 and 64 nodes (got 65); 0 drafts a chain."),
        ({"tree": -1}, "tree must be between 0 and 64 nodes (got -1); 0 drafts a chain."),
        ({"tree_width": 0}, "tree-width must be between 1 and 8 (got 0)."),
        ({"tree_width": 9}, "tree-width must be between 1 and 8 (got 9)."),
    ],
)
def test_tree_ranges_name_the_option(values, message):
    with pytest.raises(UsageError) as info:
        resolve_settings(**values)
    assert info.value.message == message


# --------------------------------------------------------------------------- presets


def preset_file(tmp_path, strategy: str, speculation: str):
    path = tmp_path / "p.yaml"
    text = f"""
        name: p
        strategy: {strategy}
        target:
          model: "embedded:tiny-target"
        draft:
          model: "embedded:tiny-draft"
        speculation:
          num_draft_tokens: 4
    """
    path.write_text(textwrap.dedent(text).lstrip("\n") + textwrap.indent(speculation, "  "))
    return path


def test_a_preset_carries_a_tree_and_the_command_line_overrides_it(tmp_path):
    preset = load_preset_file(preset_file(tmp_path, "draft", "tree: 16\ntree_width: 3\n"))
    settings = resolve_settings(preset)
    assert (settings.tree, settings.tree_width) == (16, 3)
    assert resolve_settings(preset, tree=4).tree == 4  # the flag on top of the preset
    assert resolve_settings(preset, tree=None).tree == 16  # an unset flag leaves the preset's
    assert resolve_settings(preset, tree=0).tree == 0  # --tree 0: a chain again
    checked = check_before_loading(ModelOptions(preset=str(preset.source)), GenerationOptions(tree_width=1))
    assert (checked.tree, checked.tree_width) == (16, 1)


def test_a_self_preset_with_a_tree_names_file_line_and_field(tmp_path):
    path = preset_file(tmp_path, "self", "tree: 8\n")
    with pytest.raises(PresetError) as info:
        load_preset_file(path)
    assert info.value.message.startswith(f"{path}:2: strategy: strategy 'self' drafts chains only")
    assert "draft, lookup, eagle or heads" in info.value.message
    with pytest.raises(PresetError, match=r":9: speculation.tree: "):  # its range too
        load_preset_file(preset_file(tmp_path, "draft", "tree: 100\n"))


# --------------------------------------------------------------------------- the command line


def test_tree_usage_errors_exit_2_in_one_line_before_torch(tmp_path):
    cases = [
        (SELF_REFUSED, ["generate", "hi", "--strategy", "self", "--tree", "8"]),
        ("tree must be between 0 and 64 nodes (got 65)", ["generate", "hi", "--tree", "65"]),
        ("tree-width must be between 1 and 8 (got 9)", ["generate", "hi", "--tree-width", "9"]),
        (SELF_REFUSED, ["bench", "--strategy", "draft", "--strategy", "self", "--tree", "4"]),  # any strategy
        ("--sweep-tree '-1,8': size -1 is out of range", ["bench", "--sweep-tree=-1,8"]),
        ("--sweep-tree 'x' is not a list of numbers", ["bench", "--sweep-tree", "x"]),
        ("give --sweep-k or --sweep-tree, not both", ["bench", "--sweep-k", "2,4", "--sweep-tree", "4"]),
    ]
    reports = run_cli_cases([args for _, args in cases], tmp_path)
    for (needle, args), report in zip(cases, reports, strict=True):
        assert report["code"] == 2, (args, report)
        assert needle in report["stderr"], (args, report["stderr"])
        assert len(report["stderr"].strip().splitlines()) == 1, report["stderr"]
        assert "Traceback" not in report["stderr"]
        assert report["heavy"] == [], (args, "imported before the error", report["heavy"])


class Stop(Exception):
    """Raised by a stand-in once it has seen what the command passed on."""


@pytest.mark.parametrize("command", [["generate", "hi"], ["bench"], ["serve", "--port", "0"]])
def test_tree_flags_reach_the_settings(command, monkeypatch):
    """--tree and --tree-width arrive in the options every command resolves its settings from (the
    preset's values first, then the flags): caught when a command declares them but drops them."""
    import specli.cli.bench
    import specli.cli.generate
    import specli.cli.run

    seen = []

    def stand_in(models, options, *args, **kwargs):
        seen.append(options)
        raise Stop

    monkeypatch.setattr(specli.cli.generate, "prepare_rounds", lambda text, models, options, **kw: stand_in(
        models, options
    ))  # fmt: skip
    monkeypatch.setattr(specli.cli.bench, "load_pair", stand_in)
    monkeypatch.setattr(specli.cli.run, "load_pair", stand_in)  # serve imports it when it runs
    args = [*command, "--strategy", "lookup", "--tree", "12", "--tree-width", "3", "--debug"]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, Stop), result.output
    (options,) = seen
    assert (options.tree, options.tree_width) == (12, 3)
    assert (resolve_settings(None, options).tree, options.given()["tree_width"]) == (12, 3)


@pytest.mark.parametrize("command", ["generate", "bench", "serve"])
def test_help_shows_the_tree_options(command):
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--tree " in result.stdout and "--tree-width" in result.stdout
    if command == "bench":
        assert "--sweep-tree" in result.stdout


# --------------------------------------------------------------------------- the Python API


def test_load_takes_a_tree_and_each_call_may_override_it():
    import specli

    pair = specli.load(device="cpu", tree=8, tree_width=3, threads=None)
    assert (pair.settings().tree, pair.settings().tree_width) == (8, 3)
    assert pair.settings(tree=0).tree == 0 and pair.settings(tree_width=1).tree_width == 1
    result = pair.generate("def f(x):", strategy="none", max_new_tokens=2)  # none: the tree is ignored
    assert (result.stats.tree, result.stats.tree_width) == (8, 3)
    assert result.to_dict()["stats"]["tree"] == 8 and "nodes_per_round" in result.to_dict()["stats"]
    again = pair.generate("def f(x):", strategy="none", max_new_tokens=2, tree=5, tree_width=2)
    assert (again.stats.tree, again.stats.tree_width) == (5, 2)
    with pytest.raises(UsageError, match="drafts chains only"):  # before its first round
        pair.stream("def f(x):", strategy="self", max_new_tokens=2, tree=4)


def test_load_refuses_a_bad_tree_before_any_weights_load(monkeypatch):
    import specli
    import specli.api

    def trap(*args, **kwargs):
        raise AssertionError("weights were loaded before the tree was checked")

    monkeypatch.setattr(specli.api, "_load_weights", trap)
    with pytest.raises(UsageError, match="tree must be between 0 and 64"):
        specli.load(device="cpu", tree=65)
    with pytest.raises(UsageError) as info:
        specli.load(device="cpu", strategy="self", tree=8)
    assert str(info.value) == SELF_REFUSED


# --------------------------------------------------------------------------- bench


def test_parse_sweep_tree():
    assert parse_sweep_tree("32,4,8,8") == (4, 8, 32)
    assert parse_sweep_tree("64") == (64,)
    assert parse_sweep_tree("8,0") == (0, 8)  # 0: the chain, as a row of the same run
    for bad, words in (
        ("-1,8", "size -1 is out of range"),
        ("65,-2", "sizes -2, 65 are out of range"),
        ("4,,8", "is not a list of numbers"),
        ("4-8", "is not a list of numbers"),
    ):
        with pytest.raises(UsageError) as info:
            parse_sweep_tree(bad)
        assert words in info.value.message and info.value.hint is None
        assert "like 4,8,16,32 (each 1 to 64; 0 adds the chain)" in info.value.message


def run_with(strategy, tree=0, sweep_tree=None, drafted=20, depth=2, rounds=5):
    """A measured run of `strategy` (a tree of `tree` nodes, or a chain) over `rounds` drafting rounds."""
    stats = Stats(
        rounds=rounds, drafts=rounds if drafted else 0, drafted=drafted, accepted=rounds, tokens=2 * rounds,
        rejections=0, verify_time=1.0, position_drafted=[rounds] * depth if drafted else [],
        position_accepted=[rounds] + [0] * (depth - 1) if drafted else [],
        position_judged=[rounds] * depth if drafted else [],
    )  # fmt: skip
    return b.Measurement("1", "c", strategy, 0, 1.0, stats, [1] * 10, tree=tree, sweep_tree=sweep_tree)


ENV = {"device": "cpu", "dtype": "float32", "quantization": "none", "threads": 1}


def printed(report, width=260) -> str:
    from rich.console import Console

    from specli.render.bench import bench_view

    console = Console(record=True, file=io.StringIO(), width=width)
    console.print(bench_view(report))
    return console.export_text()


def test_tree_rows_are_labelled_and_their_json_says_the_tree():
    settings = resolve_settings(num_draft_tokens=4)
    runs = [
        run_with("none", drafted=0),
        run_with("draft", drafted=20, depth=4),  # a chain: 4 a round
        run_with("draft", tree=8, sweep_tree=8, drafted=40, depth=4),  # 8 nodes a round
    ]
    report = b.report(runs, b.BenchSettings(settings, trees=(8,)), ENV, None)
    overall = report["summary"]["overall"]
    assert list(overall) == ["none", "draft", "draft tree 8"]
    tree_row = overall["draft tree 8"]
    assert (tree_row["tree"], tree_row["tree_width"], tree_row["nodes_per_round"]) == (8, 2, 8.0)
    assert (overall["draft"]["tree"], overall["draft"]["nodes_per_round"]) == (0, 4.0)
    assert overall["none"]["tree"] == 0 and overall["none"]["nodes_per_round"] == 0.0
    assert len(tree_row["per_position_accept_prob"]) == 4  # by depth, not by node
    assert [(r["tree"], r["nodes_per_round"]) for r in report["runs"]] == [(0, 0.0), (0, 4.0), (8, 8.0)]
    assert report["settings"]["sweep_tree"] == [8] and report["settings"]["tree"] == 0
    assert report["sweep"] == {}  # a tree row is no k-sweep row
    json.dumps(report)  # the report is JSON
    text = printed(report)
    assert "nodes/round" in text and "draft tree 8" in text
    assert "tree sweep 8 nodes" in text
    row = next(line for line in text.splitlines() if line.startswith("│ draft tree 8"))
    assert "8.00" in row


def test_no_nodes_column_without_a_tree():
    settings = resolve_settings(num_draft_tokens=4)
    report = b.report([run_with("none", drafted=0), run_with("draft")], b.BenchSettings(settings), ENV, None)
    assert "nodes/round" not in printed(report)
    with_tree = b.BenchSettings(resolve_settings(num_draft_tokens=4, tree=16))
    runs = [run_with("none", drafted=0), run_with("draft", tree=16, drafted=60, depth=4)]
    text = printed(b.report(runs, with_tree, ENV, None))
    assert "nodes/round" in text and "trees of ≤ 16 nodes, width 2" in text


def test_a_tree_sweep_adds_one_row_per_size_to_strategies_that_draft_trees(monkeypatch):
    """Catches a sweep that runs self with a tree (its settings refuse it), that forgets a size or a
    strategy, or that loses the k the tree row keeps (fixed_k, the settings' depth)."""
    seen = []

    def measure(pair, prompt, ids, strategy, bench, repeat, k=None, tree=None):
        seen.append((strategy, k, tree))
        settings = bench.for_strategy(strategy)
        if tree is not None:
            settings = settings.replace(tree=tree, fixed_k=True)
        stats = Stats(rounds=1, tokens=1)
        return b.Measurement(prompt.id, prompt.category, strategy, repeat, 0.1, stats, [1], k,
                             tree=settings.tree, sweep_tree=tree)  # fmt: skip

    monkeypatch.setattr(b, "measure", measure)
    prompt = SimpleNamespace(id="1", category="c", text="x")
    bench = b.BenchSettings(resolve_settings(num_draft_tokens=3), warmup=0, trees=(4, 16))
    runs = b.run_bench(object(), [(prompt, [1, 2])], ["draft", "self", "lookup"], bench)
    assert seen == [
        ("none", None, None),
        ("draft", None, None), ("draft", None, 4), ("draft", None, 16),
        ("self", None, None),
        ("lookup", None, None), ("lookup", None, 4), ("lookup", None, 16),
    ]  # fmt: skip
    assert [m.label for m in runs] == [
        "none", "draft", "draft tree 4", "draft tree 16", "self", "lookup", "lookup tree 4", "lookup tree 16"
    ]  # fmt: skip
    assert b.tree_sweep_note(["draft", "self", "lookup"]) == (
        "--sweep-tree makes no tree rows for self (it drafts chains only)."
    )
    assert b.tree_sweep_note(["none", "self"]) == (
        "--sweep-tree makes no tree rows for none (it is plain decoding) or self (it drafts chains only)."
    )
    assert b.tree_sweep_note(["draft", "eagle"]) is None


def test_a_tree_sweep_row_runs_the_whole_tree_at_the_settings_depth(monkeypatch):
    """measure(tree=N): the settings the stream gets are tree N, fixed_k, the strategy's own k."""
    got = []

    class Pair:
        target = SimpleNamespace(device=SimpleNamespace(type="cpu"))
        engine = "torch"

        def forget_prompts(self):
            pass

        def warm_up(self, **kwargs):
            return 0.0

        def stream(self, prompt_ids, settings):
            got.append(settings)
            return iter(())

    prompt = SimpleNamespace(id="1", category="c")
    bench = b.BenchSettings(resolve_settings(num_draft_tokens=5, tree_width=3))
    run = b.measure(Pair(), prompt, [1], "draft", bench, 0, tree=8)
    assert (got[0].tree, got[0].tree_width, got[0].fixed_k, got[0].num_draft_tokens) == (8, 3, True, 5)
    assert (run.tree, run.tree_width, run.sweep_tree, run.label) == (8, 3, 8, "draft tree 8")
    plain = b.measure(Pair(), prompt, [1], "none", b.BenchSettings(resolve_settings(tree=8)), 0)
    assert plain.tree == 0 and plain.to_dict()["tree"] == 0  # none drafts no tree
    chain = b.measure(Pair(), prompt, [1], "draft", b.BenchSettings(resolve_settings(tree=8)), 0, tree=0)
    assert (got[-1].tree, got[-1].fixed_k) == (0, False)  # the sweep's chain row keeps the per-round k
    assert (chain.tree, chain.sweep_tree, chain.label) == (0, 0, "draft chain")
