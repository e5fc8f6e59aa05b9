"""Prompts from files (issue 28 #18, #27, #28): bench's JSONL prompt records say what is wrong with a bad
one (an empty prompt, an empty 'turns', never a Python message such as 'list index out of range');
`generate` and `explain` take `--prompt-file F` beside `-` for stdin, refusing a missing, empty or
non-UTF-8 file before any model loads; `python -m specli` is the `specli` command. Embedded tiny pair,
CPU, offline."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import specli.api
from specli.bench.prompts import read_prompts
from specli.cli import app
from specli.errors import UsageError

PROMPT = "def fibonacci(n):"


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(app, list(args), input=input)


@pytest.fixture
def no_loading(monkeypatch):
    def trap(*args, **kwargs):
        raise AssertionError("a model was loaded before the prompt was checked")

    monkeypatch.setattr(specli.api, "load", trap)


# --------------------------------------------------------------------------- bench's prompt records


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"prompt": ""}', "the prompt ('prompt') is empty"),
        ('{"text": ""}', "the prompt ('text') is empty"),
        ('{"turns": [""]}', "the prompt (the first of 'turns') is empty"),
        ('{"turns": []}', "'turns' is empty: it needs the prompt as its first turn"),
        ('{"turns": "hi"}', "'turns' is empty"),
        ('{"turns": [3]}', "the first of 'turns' must be a string, not int"),
        ('{"id": 1}', "a prompt record needs 'turns', 'prompt' or 'text'"),
        ('["hi"]', "a prompt record is a JSON object, not list"),
        ('{"prompt": "x"', "not JSON"),
    ],
)
def test_a_bad_prompt_record_is_named_for_what_is_wrong(tmp_path, line, needle):
    """Catches the old messages: '{"prompt": ""}' called "not a prompt record", '{"turns": []}' leaking
    "list index out of range". The line number leads; the record before it is fine."""
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(UsageError) as info:
        read_prompts(path)
    assert info.value.message.startswith(f"{path}:2: "), info.value.message
    assert needle in info.value.message, info.value.message
    assert "index" not in info.value.message and "not a prompt record" not in info.value.message


def test_good_prompt_records_still_read(tmp_path):
    path = tmp_path / "prompts.jsonl"
    rows = [
        {"question_id": 7, "category": "code", "turns": ["first", "second"]},
        {"prompt": "p"},
        {"text": "t"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert [(p.id, p.category, p.text) for p in read_prompts(path)] == [
        ("7", "code", "first"),
        ("2", "default", "p"),
        ("3", "default", "t"),
    ]


def test_repeated_ids_are_made_unique_so_runs_are_not_compared_across_prompts(tmp_path):
    """Two sets' files joined repeat ids ("1" of chat and "1" of code). Reports key runs by id: bench's
    greedy identity check compared one prompt's drafted output with another prompt's plain output and
    reported a difference at token 0 (issue 31's measurement). Catches ids left repeated."""
    path = tmp_path / "joined.jsonl"
    rows = [{"id": "1", "prompt": "a"}, {"id": "1", "prompt": "b"}, {"id": "2", "prompt": "c"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert [(p.id, p.text) for p in read_prompts(path)] == [("1", "a"), ("1@2", "b"), ("2", "c")]


def test_bench_identity_check_keeps_prompts_with_the_same_id_apart(tmp_path):
    """The end-to-end form of the bug: the two `editing` prompts below share id "1"; greedy lookup is
    identical to plain decoding on each, so bench reports no error."""
    path = tmp_path / "joined.jsonl"
    rows = [{"id": "1", "prompt": "def add(a, b):"}, {"id": "1", "prompt": "class Stack:"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = invoke(
        "bench", "--strategy", "lookup", "--prompts", str(path), "--max-new-tokens", "8", "--warmup", "0",
        "--json", str(tmp_path / "r.json"), "--threads", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["errors"] == [] and sorted({r["prompt_id"] for r in report["runs"]}) == ["1", "1@2"]


# --------------------------------------------------------------------------- --prompt-file


def test_generate_prompt_file_runs_the_same_prompt_as_the_argument(tmp_path):
    """The file's text (an editor's trailing newline and a byte-order mark dropped) is the prompt: the
    same prompt ids and output as the argument."""
    path = tmp_path / "prompt.txt"
    path.write_bytes(b"\xef\xbb\xbf" + PROMPT.encode() + b"\n")
    common = ("--max-new-tokens", "6", "--device", "cpu", "--json")
    by_file = invoke("generate", "--prompt-file", str(path), *common)
    by_argument = invoke("generate", PROMPT, *common)
    assert by_file.exit_code == 0 and by_argument.exit_code == 0, by_file.output + by_argument.output
    a, b = json.loads(by_file.stdout), json.loads(by_argument.stdout)
    assert a["prompt_token_ids"] == b["prompt_token_ids"] and a["token_ids"] == b["token_ids"]


def test_explain_prompt_file_and_stdin_through_it(tmp_path):
    path = tmp_path / "prompt.txt"
    path.write_text("for i in range(3):\n    print(i)\n\n")  # only the last newline is dropped
    result = invoke("explain", "--prompt-file", str(path), "--rounds", "1", "--pace", "0", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("prompt: for i in range(3):\n    print(i)\n\n╭─ round 1")
    piped = invoke("explain", "--prompt-file", "-", "--rounds", "1", "--device", "cpu", input="x = 1\n")
    assert piped.exit_code == 0, piped.output
    assert piped.stdout.startswith("prompt: x = 1\n╭─ round 1")


@pytest.mark.parametrize("command", ["generate", "explain"])
@pytest.mark.parametrize(
    ("contents", "args", "needle"),
    [
        (None, [], "no prompt given."),
        (b"hi", ["both"], "the prompt is given twice"),
        (None, ["--prompt-file", "MISSING"], "cannot read the prompt file"),
        (b"", [], "is empty."),
        (b"\n", [], "is empty."),
        (b"caf\xe9", [], "is not UTF-8: byte 0xe9 at offset 3"),
    ],
)
def test_prompt_file_errors_before_loading(tmp_path, no_loading, command, contents, args, needle):
    """Exit 2, two plain lines, and no model loaded (the trap fails the test otherwise)."""
    path = tmp_path / "prompt.txt"
    if contents is not None:
        path.write_bytes(contents)
        args = ["--prompt-file", str(path)] + (["hi"] if args == ["both"] else [])
    elif args:
        args = ["--prompt-file", str(tmp_path / "missing.txt")]
    result = invoke(command, *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) <= 2 and needle in lines[0], result.stderr
    assert "Traceback" not in result.output and result.stdout == ""


# --------------------------------------------------------------------------- python -m specli


def test_python_m_specli_is_the_command(tmp_path):
    """Catches a missing specli/__main__.py ("No module named specli.__main__")."""
    run = subprocess.run(
        [sys.executable, "-m", "specli", "generate", "hi", "--strategy", "eagel"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 2, run.stderr
    assert "unknown strategy 'eagel'. Did you mean 'eagle'?" in run.stderr
    version = subprocess.run(
        [sys.executable, "-m", "specli", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert version.returncode == 0 and version.stdout.startswith("specli "), version.stderr
