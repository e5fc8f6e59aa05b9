"""Progress of long work on stderr: Rich bars in a terminal, a plain line now and then elsewhere.

`loading_progress` is the one live display while models load: a spinner line plus, when huggingface_hub
downloads, its bars as tasks of the same Rich `Progress` (through `tqdm_for`), so two live displays never
fight over the terminal. `Counted` is work in stages of counted units (bench: warm-up, measured runs,
transformers' runs): each stage shows its count and the time it has left, estimated from its own units
so far (before the first one, from the previous stage's when the stage says it is alike).

Colours follow the console: a console made with no_color=True (`--no-color`, NO_COLOR) draws the bars
and spinners without colour.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich import filesize
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
)
from rich.text import Text
from tqdm.std import tqdm

from specli.wording import clock
from specli.wording import count as plural

PLAIN_STEPS = 4  # off a terminal, a byte bar prints a line at every quarter of its total


class AmountColumn(ProgressColumn):
    """'1.2/8.0 GB' for byte tasks, '3/12' for counted ones, nothing for a spinner line."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        if task.fields.get("unit") == "B":
            return Text(f"{filesize.decimal(int(task.completed))}/{filesize.decimal(int(task.total))}")
        return Text(f"{int(task.completed)}/{int(task.total)}")


def new_progress(console: Console, transient: bool = True) -> Progress:
    """Spinner, description, bar, amount; no live drawing at all off a terminal."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        AmountColumn(),
        console=console,
        transient=transient,
        disable=not console.is_terminal,
    )


def tqdm_for(progress: Progress, label: str = "") -> type[tqdm]:
    """A tqdm class whose bars are tasks of `progress` (for huggingface_hub's `tqdm_class`).

    A bar shows once it has something to count (a cached model shows nothing). Off a terminal, byte bars
    print '<label>: 1.2 GB of 8.0 GB (25%)' at every quarter instead.
    """
    console = progress.console

    class RichTqdm(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.pop("name", None)  # huggingface_hub's own keyword
            kwargs["file"] = io.StringIO()  # tqdm's own drawing goes nowhere
            kwargs["disable"] = False
            super().__init__(*args, **kwargs)
            text = f"{label}: {self.desc}" if label and self.desc else (label or self.desc or "")
            self._task = progress.add_task(text, total=self.total or None, visible=False, unit=self.unit)
            self._step = 0
            self.display()

        def display(self, msg: str | None = None, pos: int | None = None) -> bool:
            task = getattr(self, "_task", None)
            if task is None:  # tqdm draws once inside __init__, before the task exists
                return True
            total = self.total or None
            progress.update(task, completed=self.n, total=total, visible=bool(total or self.n))
            if not console.is_terminal and self.unit == "B" and total:
                step = min(int(self.n * PLAIN_STEPS / total), PLAIN_STEPS)
                if step > self._step:
                    self._step = step
                    console.print(
                        f"{label or 'download'}: {filesize.decimal(int(self.n))} of "
                        f"{filesize.decimal(int(total))} ({100 * step // PLAIN_STEPS}%)",
                        markup=False,
                        highlight=False,
                    )
            return True

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            self.display()  # Rich throttles its own drawing; the task is always current
            return shown

        def close(self) -> None:
            if not self.disable:
                self.display()
            super().close()

    return RichTqdm


@contextmanager
def loading_progress(
    console: Console, message: str = "loading models…", announce: str | None = None
) -> Iterator[Callable[[str], type]]:
    """A spinner line for `message` while the block runs; yields `bars(label) -> tqdm class` for
    downloads, whose bars join the same display. Off a terminal, with `announce` (e.g. "bench"), a line
    when loading starts and one with the time it took, so a piped log shows the stage."""
    plain = announce is not None and not console.is_terminal
    start = time.monotonic()
    if plain:
        _print(console, f"{announce}: {message}")
    with new_progress(console) as progress:
        progress.add_task(message, total=None)
        yield lambda label: tqdm_for(progress, label)
    if plain:
        _print(console, f"{announce}: models loaded in {clock(time.monotonic() - start)}")


def time_left(
    done: float, total: float | None, elapsed: float, per_unit: float | None = None
) -> float | None:
    """Seconds left: the stage's own mean time per unit so far times the units left; before the first
    unit, `per_unit` (a similar earlier stage's) times the units left, less the time already spent;
    None when there is nothing to go on."""
    if total is None:
        return None
    if done > 0:
        return elapsed / done * max(0.0, total - done)
    if per_unit is not None:
        return max(0.0, per_unit * total - elapsed)
    return None


class EstimateColumn(ProgressColumn):
    """'about 1:30 left' from the task's own pace (Rich's TimeRemainingColumn needs two updates within
    30 s, so it shows -:--:-- whenever a unit takes longer); the time taken once the task is done."""

    max_refresh = 0.5

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        if task.finished:
            return Text(f"took {clock(elapsed)}", style="progress.elapsed")
        left = time_left(task.completed, task.total, elapsed, task.fields.get("per_unit"))
        if left is None:
            return Text("estimating…", style="progress.remaining")
        return Text(f"about {clock(left)} left", style="progress.remaining")


class Counted:
    """Counted work in stages (`with Counted(console, "bench") as c: c.stage("warm-up", 4); c.advance()`).

    In a terminal: a Rich bar with the stage, its count and the time it has left. Off one: a line when a
    stage starts (its count, and an estimate when a similar stage came before), then '<what>: <stage>:
    3/12 runs · about 0:40 left' at every tenth, and the time the stage took at its end. `clock` is the
    time source (tests pass a fake one)."""

    def __init__(
        self,
        console: Console,
        what: str,
        total: int | None = None,
        steps: int = 10,
        unit: str = "run",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console, self.what, self.steps, self.unit, self.clock = console, what, steps, unit, clock
        self.description = ""  # the current stage ("" before the first)
        self.total = total
        self.done = self.shown = 0
        self.started = clock()
        self.per_unit: float | None = None  # the last finished stage's seconds per unit
        self._hint: float | None = None  # the current stage's estimate before its first unit
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            EstimateColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
            get_time=clock,
        )
        self.task = self.progress.add_task(what, total=total)

    def __enter__(self) -> Counted:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._finish_stage()
        self.progress.stop()

    def stage(self, description: str, total: int | None = None, similar: bool = False) -> None:
        """Start a stage of `total` units (None: uncounted). `similar`: its units cost about what the
        previous stage's did, so that stage's pace estimates this one until its first unit is done."""
        self._finish_stage()
        self.description, self.total = description, total
        self.done = self.shown = 0
        self.started = self.clock()
        self._hint = self.per_unit if similar else None
        self.progress.reset(
            self.task,
            total=total,
            completed=0,
            description=f"{self.what}: {description}",
            per_unit=self._hint,
        )
        if not self.console.is_terminal:
            count = f": {plural(total, self.unit)}" if total is not None else ""
            left = time_left(0, total, 0.0, self._hint)
            estimate = f", about {clock(left)} (at the previous stage's pace)" if left is not None else ""
            self._line(f"{self.what}: {description}{count}{estimate}")

    def advance(self, n: int = 1) -> None:
        """`n` more units of the current stage are done."""
        if n <= 0:
            return
        self.done += n
        self.progress.advance(self.task, n)
        if self.console.is_terminal or self.total is None:
            return
        step = self.done * self.steps // max(self.total, 1)
        if step > self.shown or self.done >= self.total:
            self.shown = step
            elapsed = self.clock() - self.started
            if self.done >= self.total:
                tail = f"took {clock(elapsed)}"
            else:
                tail = f"about {clock(time_left(self.done, self.total, elapsed) or 0.0)} left"
            stage = f"{self.description}: " if self.description else ""
            self._line(f"{self.what}: {stage}{self.done}/{plural(self.total, self.unit)} · {tail}")

    def _finish_stage(self) -> None:
        if self.done:
            self.per_unit = (self.clock() - self.started) / self.done

    def _line(self, text: str) -> None:
        _print(self.console, text)


def _print(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False)
