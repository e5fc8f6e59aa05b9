"""Usage errors that need no model come before torch loads (issue 28 #20, #21, #26): an unknown
strategy (with "Did you mean"), -k out of range (also against a local model's context, read from its
config.json), a missing model folder, a bad dtype, quantization or device, for generate and explain:
exit 2, one or two plain lines, and neither torch nor transformers imported. click's own usage errors
(an option's range, a missing argument, an unknown option) are plain lines too, not Rich boxes."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli_cases
from typer.testing import CliRunner

from specli.cli import app
from specli.cli.options import GenerationOptions, ModelOptions, check_before_loading
from specli.errors import UsageError


def test_model_option_errors_come_before_torch_is_imported(tmp_path):
    """Catches the check running after `import torch` (load_pair importing specli.api first): each case
    then reports torch imported. The -k-against-context case needs only the folder's config.json."""
    short = tmp_path / "short"
    short.mkdir()
    (short / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 16}))
    absent = str(tmp_path / "absent")
    cases = [
        ("unknown strategy 'eagel'. Did you mean 'eagle'?", ["generate", "hi", "--strategy", "eagel"]),
        ("num-draft-tokens must be between 1 and 64 (got 0)", ["explain", "hi", "-k", "0"]),
        ("(got 1000)", ["generate", "hi", "-k", "1000"]),
        (f"model folder '{absent}' does not exist", ["generate", "hi", "--target", absent]),
        ("unknown dtype 'float8'", ["explain", "hi", "--dtype", "float8"]),
        ("unknown quantization '3bit'", ["generate", "hi", "--quant", "3bit"]),
        ("unknown device 'tpu'", ["explain", "hi", "--device", "tpu"]),
        (
            f"num-draft-tokens 20 does not fit the context of '{short}' (16 tokens)",
            ["generate", "hi", "--target", str(short), "--strategy", "lookup", "-k", "20"],
        ),
        (
            f"model folder '{absent}' does not exist",
            ["explain", "hi", "--target", str(short), "--draft", absent, "--strategy", "draft"],
        ),
    ]
    reports = run_cli_cases([args for _, args in cases], tmp_path)
    for (needle, args), report in zip(cases, reports, strict=True):
        assert report["code"] == 2, (args, report)
        assert needle in report["stderr"], (args, report["stderr"])
        assert len(report["stderr"].strip().splitlines()) <= 2, report["stderr"]
        assert report["heavy"] == [], (args, "imported before the error", report["heavy"])


def test_a_draft_folder_is_checked_only_for_a_strategy_that_loads_it(tmp_path):
    """--draft beside --strategy lookup is never loaded (loading ignores it), so its folder is no error
    there; under draft it is. Catches the check refusing a drafter the run would not load."""
    short = tmp_path / "short"
    short.mkdir()
    (short / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 16}))
    absent = str(tmp_path / "absent")
    settings = check_before_loading(ModelOptions(target=str(short), draft=absent, strategy="lookup"))
    assert settings.strategy == "lookup"
    with pytest.raises(UsageError, match="does not exist"):
        check_before_loading(ModelOptions(target=str(short), draft=absent, strategy="draft"))
    with pytest.raises(UsageError, match="does not fit the context"):  # the drafter's context counts too
        check_before_loading(
            ModelOptions(target="embedded:tiny-target", draft=str(short), strategy="draft"),
            GenerationOptions(num_draft_tokens=15),
        )


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["explain", "hi", "--top", "0"], "'--top'"),
        (["explain", "hi", "--rounds", "0"], "'--rounds'"),
        (["explain", "hi", "--pace", "-1"], "'--pace'"),
        (["generate", "hi", "--bogus"], "--bogus"),
        (["bench", "--repeats", "0"], "'--repeats'"),
    ],
)
def test_click_usage_errors_are_two_plain_lines(args, needle):
    """Catches typer's Rich error box (╭─ Error ─╮ around the message, usage lines above it): exit 2, the
    problem named on the first line, where to look on the second, nothing on stdout."""
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("error: ") and needle in lines[0], lines
    assert lines[1] == f"Run 'specli {args[0]} --help' for its options."
    assert "╭" not in result.stderr and result.stdout == ""
