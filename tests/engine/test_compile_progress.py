"""`--compile` with no terminal (issue 28 #19): the compile before the first round, which takes minutes
cold on a small CPU, prints plain progress lines on stderr (a spinner draws nothing when piped): one as
it starts, naming what it builds, then one every few seconds with the seconds so far and the graphs
built. A fake pair stands in for the compile; it waits, with a deadline, until lines arrived."""

from __future__ import annotations

import io
import threading
import time

from rich.console import Console

from specli.cli import run
from specli.settings import resolve_settings


class SlowCompile:
    """A pair whose warm_up lasts until `lines` progress lines were printed (or 10 s passed)."""

    def __init__(self, out: io.StringIO, lines: int, step: str = "lean") -> None:
        self.out, self.lines, self.step = out, lines, step

    def drafter_step(self, strategy: str) -> str:
        return self.step

    def warm_up(self, prompt_ids, settings) -> float:
        deadline = time.monotonic() + 10
        while self.out.getvalue().count("still compiling") < self.lines and time.monotonic() < deadline:
            time.sleep(0.005)  # waiting on a condition (lines from the other thread), not for a duration
        return 1.5


def test_piped_compile_prints_progress_lines_on_stderr(monkeypatch):
    """Catches the spinner alone (nothing on stderr during a cold compile when piped): the first line
    says what is compiled, then a line per interval. The lines stop when the compile ends."""
    out = io.StringIO()
    monkeypatch.setattr(run, "stderr_console", lambda no_color=False: Console(file=out, width=200))
    settings = resolve_settings(num_draft_tokens=4)
    seconds = run.compile_stage(SlowCompile(out, 2), [1, 2], settings, every=0.01)
    assert seconds == 1.5
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        "compiling the target's verifies of 1..5 tokens (torch.compile; cached on disk for next runs) ..."
    )
    assert len(lines) >= 3 and all(line.startswith("still compiling: ") for line in lines[1:]), lines
    assert lines[1].endswith("s so far, 0 graphs built"), lines[1]
    ticking = [t for t in threading.enumerate() if t.name == "specli-compile-progress"]
    assert ticking == []  # the ticker ended with the compile: no line comes after it


def test_what_the_compile_builds_is_named():
    draft = resolve_settings(strategy="draft", num_draft_tokens=3)
    assert run.compile_what(SlowCompile(io.StringIO(), 0, "compiled"), draft) == (
        "the target's verifies of 1..4 tokens and the draft model's steps"
    )
    assert run.compile_what(SlowCompile(io.StringIO(), 0), draft) == "the target's verifies of 1..4 tokens"
    plain = resolve_settings(strategy="none")
    assert run.compile_what(SlowCompile(io.StringIO(), 0), plain) == "the target's plain steps"
