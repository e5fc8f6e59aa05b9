"""The details of the training loop every `specli train` kind shares: when --time-limit stops it, the
learning rate of the first warm-up step, and how documents are joined into the token stream."""

from __future__ import annotations

import pytest
import torch

from specli.training import data, loop
from specli.training.common import lr_at, make_optimizer, train_step


class _Clock:
    """A fake clock that moves only when a step runs: step i takes durations[i] seconds."""

    def __init__(self, durations: list[float]) -> None:
        self.now, self.durations, self.steps = 0.0, durations, 0

    def __call__(self) -> float:
        return self.now

    def step(self) -> None:
        self.now += self.durations[self.steps]
        self.steps += 1


def _model_and_loss(clock: _Clock | None = None):
    model = torch.nn.Linear(3, 1)
    x = torch.ones(4, 3)

    def step_loss():
        if clock is not None:
            clock.step()
        return model(x).pow(2).mean(), {"loss": 0.0}

    return model, step_loss


def test_the_deadline_is_judged_by_the_mean_step_time():
    """Steps of 5, 1, 1, 1, 1, 1 ... s and a deadline at 10.5 s: before each step the loop adds the mean
    step time so far to the clock and stops when that reaches the deadline. After 5 steps (9 s, mean 1.8)
    it stops; the last step's time (1 s) would run a 6th, no estimate a 7th past the deadline, the
    first (or the longest) step's time would stop after 2 (catches any of those in place of the mean)."""
    clock = _Clock([5.0] + [1.0] * 20)
    model, step_loss = _model_and_loss(clock)
    state = loop.LoopState()
    limits = loop.Limits(steps=20, deadline=10.5)
    stopped = loop.run_steps(
        model, make_optimizer(model, 1e-3), step_loss, state, limits, 1e-3, 1, lambda s: None, clock=clock
    )
    assert stopped == loop.TIME_LIMIT
    assert state.step == 5 and clock.now == 9.0 and state.seconds == 9.0


def test_validation_is_recorded_every_n_steps_and_training_resumes_in_train_mode():
    """With validate_every 3 over 7 steps, the history holds validation records after steps 3 and 6 with
    the tokens seen then, each computed by the callback in eval mode, and the steps after a validation
    run in train mode (catches a validation at the wrong steps, a missing token count, or a model left in
    eval mode, which would train a dropout model without dropout)."""
    model, base_loss = _model_and_loss()
    modes: list[bool] = []

    def step_loss():
        modes.append(model.training)
        return base_loss()

    def validate() -> list[float]:
        model.eval()
        return [float(len(modes))]

    state = loop.LoopState()
    limits = loop.Limits(steps=7, log_every=100, validate_every=3)
    loop.run_steps(
        model, make_optimizer(model, 1e-3), step_loss, state, limits, 1e-3, 10, lambda s: None,
        validate=validate,
    )  # fmt: skip
    records = [h for h in state.history if "validation" in h]
    assert records == [
        {"step": 3, "tokens": 30, "validation": [3.0]},
        {"step": 6, "tokens": 60, "validation": [6.0]},
    ]
    assert modes == [True] * 7


def test_the_first_warm_up_step_learns():
    """Step 0 of the warm-up runs at a learning rate above 0 and moves the weights; the ramp reaches the
    peak at its last step and then decays (catches a warm-up of peak·step/warmup, whose first step is
    wasted at lr 0)."""
    total, peak = 200, 1e-2
    warmup = total // 20
    assert 0 < lr_at(0, total, peak) < lr_at(1, total, peak)
    assert lr_at(warmup - 1, total, peak) == pytest.approx(peak) and lr_at(warmup + 1, total, peak) < peak
    model, step_loss = _model_and_loss()
    optimizer = make_optimizer(model, peak)
    before = [p.detach().clone() for p in model.parameters()]
    train_step(model, optimizer, 0, total, peak, step_loss)
    assert optimizer.param_groups[0]["lr"] > 0
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_document_that_ends_in_eos_gets_no_second_one():
    """EOS after each document unless it already ends in one; an empty document is one EOS (catches a
    doubled EOS, which teaches the drafter that EOS follows EOS)."""
    eos = 0
    stream = data.token_stream([[5, 6, eos], [7, 8], [], [9, eos]], eos)
    assert stream.tolist() == [5, 6, eos, 7, 8, eos, eos, 9, eos]
    assert stream.dtype == torch.long
