"""`specli train` as a command: usage errors that need no model come before torch loads, each one or two
plain lines naming the problem (a missing --target or --data named once), exit 2, nothing written; a
finished run prints its result and the folder it wrote on stdout; --resume of a finished run says that
nothing is left and how --steps extends it, without training or measuring again; counts agree in
number ("1 document")."""

from __future__ import annotations

import json

from conftest import CORPUS, run_cli_cases
from typer.testing import CliRunner

from specli.cli import app

TARGET = "embedded:tiny-target"
OK = ["--target", TARGET, "--data", "stdlib"]  # a new run's sources, fine on their own
EARLY = {
    "no --target": (["--data", "stdlib"], "train needs --target MODEL (the model to train a drafter for)."),
    "no --data": (["--target", TARGET], "specli train needs --data SOURCE (the text to train on)."),
    "neither": ([], "specli train needs --target MODEL (the model to train a drafter for) and --data SOURCE"),
    "missing model folder": (["--target", "./no-such-model", "--data", "stdlib"], "'./no-such-model' does"),
    "bad dtype": ([*OK, "--dtype", "float8"], "unknown dtype 'float8'"),
    "bad quant": ([*OK, "--quant", "3bit"], "unknown quantization"),
    "bad device": ([*OK, "--device", "gpu"], "unknown device 'gpu'"),
    "non-empty --out": ([*OK, "@busy"], "is not empty"),
    "nothing to resume": (["--resume"], "nothing to resume"),
    "no data there": (["--target", TARGET, "--data", "no-such.jsonl"], "no data at 'no-such.jsonl'"),
    "a zero --steps": ([*OK, "--steps", "0"], "--steps must be at least 1"),
    "unknown --init": ([*OK, "--init", "embedded:nope"], "no embedded model"),
    "missing prompts file": ([*OK, "--eval-prompts", "nope.jsonl"], "cannot read prompts from 'nope.jsonl'"),
}


def test_usage_errors_come_before_torch_is_imported(tmp_path):
    """Each case: exit 2, one error line (and at most a hint), the message, neither torch nor
    transformers imported, --out as it was (catches a check left after `import torch`, e.g. in
    specli.training.command, which takes 5-9 s to import; and the old 'needs --target and --data (and
    --target)')."""
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine\n")
    out = tmp_path / "out"
    cases = []
    for words, _ in EARLY.values():
        where = str(busy) if "@busy" in words else str(out)
        cases.append(["train", "eagle3", *[w for w in words if w != "@busy"], "--out", where])
    reports = run_cli_cases(cases, tmp_path)
    for (case, (_, message)), report in zip(EARLY.items(), reports, strict=True):
        lines = report["stderr"].strip().splitlines()
        assert report["code"] == 2, (case, report)
        assert message in lines[0] and lines[0].startswith("error: ") and len(lines) <= 2, (case, lines)
        assert report["heavy"] == [], (case, report["heavy"])
    assert "(and --target)" not in reports[0]["stderr"]
    assert not out.exists() and [p.name for p in busy.iterdir()] == ["notes.txt"]


def test_a_finished_run_prints_its_result_and_resume_says_nothing_is_left(tiny_pair, tmp_path):
    """A finished run: the result (the folder, the measurement, how to use it) on stdout, the progress
    and notes on stderr, with counts in the singular where they are 1. --resume of it: exit 0, 'nothing
    is left' with the --steps that extends it, the result again, and neither training nor measuring
    again (training.json untouched) (catches 'resuming at step 1/1' and a rerun measurement, an empty
    stdout, '1 documents')."""
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"text": "".join(CORPUS * 4)}) + "\n")  # one document
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "def fibonacci(n):\n"}) + "\n")
    out = tmp_path / "head"
    args = ["eagle1", "--target", str(tiny_pair[0]), "--data", str(data), "--out", str(out), "--quick"]
    args += ["--steps", "1", "--eval-prompts", str(prompts), "--eval-count", "1", "--eval-tokens", "6"]
    runner = CliRunner()
    first = runner.invoke(app, ["train", *args, "--threads", "1"])
    assert first.exit_code == 0, first.output
    assert "data: 1 document, " in first.stderr and "1 step of" in first.stderr
    assert "1 held-out prompt," in first.stderr
    assert "1 documents" not in first.output and "1 steps" not in first.output
    stdout = first.stdout.splitlines()
    assert stdout[0].startswith(f"eagle1 drafter written to {out}")
    assert any(line.startswith("trained (k=4): α ") for line in stdout), stdout
    assert stdout[-1].endswith(f"--strategy eagle --draft {out}") and "plain decoding" not in first.stderr
    written = (out / "training.json").read_text()
    assert json.loads(written)["measurement"]["identical"]

    again = runner.invoke(app, ["train", "eagle1", "--out", str(out), "--resume", "--threads", "1"])
    assert again.exit_code == 0, again.output
    assert "nothing is left to train" in again.stderr and "is at step 1 of 1" in again.stderr
    assert f"--out {out} --resume --steps 2" in again.stderr and "resuming" not in again.output
    assert again.stdout == first.stdout  # the same result, read back
    assert (out / "training.json").read_text() == written  # neither trained nor measured again
