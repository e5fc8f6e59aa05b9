"""The loop `specli train` runs: one optimizer step at a time (specli.training.common.train_step, the math
every recipe shares), a checkpoint every N steps, and a clean stop between two steps at Ctrl-C or at the
deadline, so the checkpoint written then continues exactly where the run stopped.

Ctrl-C is caught as a request (SIGINT sets a flag the loop reads between steps); a second Ctrl-C
interrupts at once (KeyboardInterrupt; the last periodic checkpoint stays).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from specli.training.common import train_step

DONE, INTERRUPTED, TIME_LIMIT = "done", "interrupted", "time limit"


@dataclass
class LoopState:
    """Where a run is: steps done, training tokens seen, seconds spent stepping (all sessions), and the
    records kept for training.json."""

    step: int = 0
    tokens: int = 0
    seconds: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "tokens": self.tokens, "seconds": self.seconds, "history": self.history}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopState:
        return cls(int(data["step"]), int(data["tokens"]), float(data["seconds"]), list(data["history"]))


@dataclass(frozen=True)
class Limits:
    """How far to go: `steps` in all (the schedule's length), a checkpoint every `checkpoint_every` steps
    (0: only at the end), a deadline on `clock` (None: none), a history record every `log_every` steps,
    and a validation record every `validate_every` steps (0: none)."""

    steps: int
    checkpoint_every: int = 0
    deadline: float | None = None
    log_every: int = 10
    validate_every: int = 0


class Reporter(Protocol):
    """Where the loop says how it goes (specli.training.progress.TrainProgress)."""

    def step(self, state: LoopState, record: dict[str, Any]) -> None: ...


class StopRequest:
    """A flag SIGINT sets (in the main thread) while `catching()`; a second SIGINT raises as usual."""

    def __init__(self) -> None:
        self.requested = False

    @contextmanager
    def catching(self) -> Iterator[StopRequest]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum: int, frame: Any) -> None:
            if self.requested:  # the second Ctrl-C: stop now
                raise KeyboardInterrupt
            self.requested = True

        signal.signal(signal.SIGINT, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


def run_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step_loss: Callable[[], tuple[torch.Tensor, dict[str, Any]]],
    state: LoopState,
    limits: Limits,
    peak_lr: float,
    tokens_per_step: int,
    checkpoint: Callable[[LoopState], None],
    reporter: Reporter | None = None,
    clock: Callable[[], float] = time.monotonic,
    stop: StopRequest | None = None,
    validate: Callable[[], list[float]] | None = None,
) -> str:
    """Step from state.step to limits.steps; returns why it ended: DONE, INTERRUPTED (Ctrl-C) or
    TIME_LIMIT (the next step would end past the deadline, judged by the mean step time so far). Calls
    checkpoint(state) every limits.checkpoint_every steps; the caller checkpoints at the end. Every
    limits.validate_every steps, validate() (agreement by depth on fixed held-out windows) goes into the
    history as {"step", "tokens", "validation"}, so training.json shows it as training went; its time is
    not counted as stepping."""
    stop = stop or StopRequest()
    model.train()
    spent, done_here = 0.0, 0
    with stop.catching():
        while state.step < limits.steps:
            if stop.requested:
                return INTERRUPTED
            now = clock()
            mean = spent / done_here if done_here else 0.0
            if limits.deadline is not None and now + mean >= limits.deadline:
                return TIME_LIMIT
            record = train_step(model, optimizer, state.step, limits.steps, peak_lr, step_loss)
            took = clock() - now
            spent, done_here = spent + took, done_here + 1
            state.step += 1
            state.tokens += tokens_per_step
            state.seconds += took
            if (state.step - 1) % limits.log_every == 0 or state.step == limits.steps:
                state.history.append({"step": state.step, **record})
            if reporter is not None:
                reporter.step(state, record)
            if validate is not None and limits.validate_every and state.step % limits.validate_every == 0:
                state.history.append({"step": state.step, "tokens": state.tokens, "validation": validate()})
                model.train()
            every = limits.checkpoint_every
            if every and state.step % every == 0 and state.step < limits.steps:
                checkpoint(state)
    return DONE
