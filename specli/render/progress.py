"""Progress of long work on stderr: Rich bars in a terminal, a plain line now and then elsewhere.

`loading_progress` is the one live display while models load: a spinner line plus, when huggingface_hub
downloads, its bars as tasks of the same Rich `Progress` (through `tqdm_for`), so two live displays never
fight over the terminal.
"""

from __future__ import annotations

import io
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
    TimeRemainingColumn,
)
from rich.text import Text
from tqdm.std import tqdm

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
def loading_progress(console: Console, message: str = "loading models…") -> Iterator[Callable[[str], type]]:
    """A spinner line for `message` while the block runs; yields `bars(label) -> tqdm class` for
    downloads, whose bars join the same display."""
    with new_progress(console) as progress:
        progress.add_task(message, total=None)
        yield lambda label: tqdm_for(progress, label)


class Counted:
    """Counted work (`with Counted(console, "bench", 12) as c: c.advance()`): a Rich bar with the count and
    the time left in a terminal; off one, '<what>: 3/12' at every tenth and a line per `stage`."""

    def __init__(self, console: Console, what: str, total: int, steps: int = 10) -> None:
        self.console, self.what, self.total, self.steps = console, what, total, steps
        self.done = self.shown = 0
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self.task = self.progress.add_task(what, total=total)

    def __enter__(self) -> Counted:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def advance(self) -> None:
        self.done += 1
        self.progress.advance(self.task)
        step = self.done * self.steps // max(self.total, 1)
        if not self.console.is_terminal and (step > self.shown or self.done == self.total):
            self.shown = step
            self._line(f"{self.what}: {self.done}/{self.total}")

    def stage(self, description: str) -> None:
        """A new stage of the same work (the bar's label; a line of its own off a terminal)."""
        self.progress.update(self.task, description=description)
        if not self.console.is_terminal:
            self._line(f"{self.what}: {description}")

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)
