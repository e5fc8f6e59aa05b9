"""What a training run shows on stderr: a Rich bar with the step, loss, agreement with the target at draft
depths 1..3, tokens seen and the time left (the sooner of the run's end at its pace and --time-limit);
off a terminal, the same as a line at every 5% of the steps.

Loss and agreement are shown smoothed (an exponential mean over about 20 steps): one batch is noisy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from specli.training.loop import LoopState
from specli.wording import clock

SMOOTHING = 0.1
DEPTHS_SHOWN = 3
PLAIN_LINES = 20


def tokens_words(n: int) -> str:
    """'850', '12.3k', '4.56M', '1.20B' tokens."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def tokens_count(n: int) -> str:
    """'1 token', '850 tokens', '12.3k tokens'."""
    return f"{tokens_words(n)} {'token' if n == 1 else 'tokens'}"


def agreement_words(values: list[float | None]) -> str:
    """'0.71 0.52 –' for depths 1..3 (– where the kind does not draft that deep)."""
    shown = (values + [None] * DEPTHS_SHOWN)[:DEPTHS_SHOWN]
    return " ".join("–" if v is None else f"{v:.2f}" for v in shown)


class Smoothed:
    """Exponential means of the loss and of each depth's agreement."""

    def __init__(self) -> None:
        self.loss: float | None = None
        self.agree: list[float | None] = []

    def add(self, record: dict[str, Any]) -> None:
        self.loss = _mix(self.loss, float(record.get("loss", next(iter(record.values())))))  # first: the loss
        agree = list(record.get("agree") or [])
        old = self.agree + [None] * (len(agree) - len(self.agree))
        self.agree = [_mix(o, agree[i]) if i < len(agree) else o for i, o in enumerate(old)]


def _mix(old: float | None, new: float) -> float:
    return new if old is None else old + SMOOTHING * (new - old)


class TrainProgress:
    """The bar of one run (a context manager). deadline: on `clock`, None without --time-limit."""

    def __init__(
        self,
        console: Console,
        name: str,
        total: int,
        start: int = 0,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console, self.name, self.total, self.deadline, self.clock = console, name, total, deadline, clock
        self.start_step, self.started = start, clock()
        self.smoothed = Smoothed()
        self.lines_shown = 0
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]} · agree {task.fields[agree]} · {task.fields[tokens]} tok"),
            TextColumn("· {task.fields[left]}"),
            console=console,
            transient=False,
            disable=not console.is_terminal,
        )
        self.task = self.progress.add_task(
            name, total=total, completed=start, loss="–", agree=agreement_words([]), tokens="0", left="…"
        )

    def __enter__(self) -> TrainProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def time_left(self, step: int) -> float | None:
        """The run's end at this session's pace, or the deadline when that comes first."""
        elapsed = self.clock() - self.started
        done = step - self.start_step
        left = elapsed / done * (self.total - step) if done > 0 else None
        if self.deadline is not None:
            until = max(0.0, self.deadline - self.clock())
            left = until if left is None else min(left, until)
        return left

    def step(self, state: LoopState, record: dict[str, Any]) -> None:
        self.smoothed.add(record)
        left = self.time_left(state.step)
        fields = {
            "loss": f"{self.smoothed.loss:.3f}",
            "agree": agreement_words(self.smoothed.agree),
            "tokens": tokens_words(state.tokens),
            "left": "estimating…" if left is None else f"{clock(left)} left",
        }
        self.progress.update(self.task, completed=state.step, **fields)
        if not self.console.is_terminal:
            line = state.step * PLAIN_LINES // self.total
            if line > self.lines_shown or state.step == self.total:
                self.lines_shown = line
                self.console.print(
                    f"{self.name} step {state.step}/{self.total} · loss {fields['loss']} · agree "
                    f"{fields['agree']} · {fields['tokens']} tokens · {fields['left']}",
                    markup=False,
                    highlight=False,
                )
