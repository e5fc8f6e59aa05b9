"""Pieces of `specli serve` driven directly, no model and no server: the stop-string trimmer a stream goes
through (specli/serve/stops.py), and the worker's timings (time to first token)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from specli.engine.events import Round, StopReason, TokenKind
from specli.serve.stops import StopTrimmer
from specli.serve.worker import Finished, Job, Worker
from specli.settings import resolve_settings

# --------------------------------------------------------------------------- stop strings over a stream


def expected_answer(text: str, stops: tuple[str, ...]) -> str:
    """The text cut before the earliest stop string in it (OpenAI's rule), found by brute force."""
    starts = [i for i in range(len(text)) if any(text.startswith(s, i) for s in stops)]
    return text[: starts[0]] if starts else text


def could_start_a_stop(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest tail of `text` that is a proper start of some stop string (brute force)."""
    return max(
        (n for n in range(1, len(text) + 1) for s in stops if len(s) > n and s.startswith(text[-n:])),
        default=0,
    )


def run_trimmer(chunks: list[str], stops: tuple[str, ...]) -> tuple[list[str], str]:
    trimmer = StopTrimmer(stops)
    shown = [trimmer.push(chunk) for chunk in chunks]
    return shown, trimmer.finish()


CASES = [
    # (text the engine produced, stop strings); the engine stops once a stop string is complete, but a
    # round's last token can carry text past it
    ("def f(x):\n    return x\n\n\nclass A:", ("\n\n\n",)),
    ("one, two; three", (";", ",")),  # the earliest match wins, not the first listed
    ("abcabcabd tail", ("abd",)),  # a partial match that fails, then a real one
    ("xxababc", ("abc", "bab")),  # overlapping candidates: "bab" starts first
    ("no stop here at all", ("STOP", "end!")),
    ("aaaab!", ("aab",)),  # the held tail must be the longest one, not the first found
    ("héllo wörld", ("wö",)),  # characters, not bytes
]


@pytest.mark.parametrize(("text", "stops"), CASES, ids=[c[0][:12] for c in CASES])
def test_a_stop_string_split_across_chunks_at_every_offset(text, stops):
    """Two chunks split at every offset, three chunks at every pair of offsets, and one character at a
    time: the joined answer is the text before the earliest stop string. Catches a stop string missed
    when a chunk boundary cuts it, the first listed stop winning over an earlier one, text after the stop
    let through."""
    want = expected_answer(text, stops)
    for i, j in itertools.combinations_with_replacement(range(len(text) + 1), 2):
        shown, tail = run_trimmer([text[:i], text[i:j], text[j:]], stops)
        assert "".join(shown) + tail == want, (i, j)
    shown, tail = run_trimmer(list(text), stops)
    assert "".join(shown) + tail == want


@pytest.mark.parametrize(("text", "stops"), CASES, ids=[c[0][:12] for c in CASES])
def test_what_is_held_back_is_exactly_what_could_still_start_a_stop(text, stops):
    """Fed one character at a time: until a stop string is complete, what has been shown is the text so
    far minus exactly its longest tail that could begin a stop string; nothing shown is ever cut later.
    Catches a trimmer that holds back too little (a stream that shows what a stop then cuts) or too much
    (text held that no stop string can begin: a stream that lags behind the rounds)."""
    want = expected_answer(text, stops)
    trimmer, shown = StopTrimmer(stops), ""
    for n in range(1, len(text) + 1):
        shown += trimmer.push(text[n - 1])
        so_far = text[:n]
        assert want.startswith(shown)
        if any(s in so_far for s in stops):
            break
        assert shown == so_far[: n - could_start_a_stop(so_far, stops)], so_far


def test_without_stop_strings_every_chunk_passes_at_once():
    trimmer = StopTrimmer(())
    assert [trimmer.push(c) for c in ("ab", "", "c\n")] == ["ab", "", "c\n"] and trimmer.finish() == ""


# --------------------------------------------------------------------------- the worker's timings


class FakeClock:
    """perf_counter's stand-in: time moves only when the fake pair says a round took a second."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _round(index: int, stop: StopReason | None) -> Round:
    return Round(
        index=index, drafted=[], draft_probs=[], target_probs=[], target_argmax=[7], accept_probs=[],
        uniforms=[], accepted=0, token=7, kind=TokenKind.CORRECTION, committed=[7], draft_time=0.0,
        verify_time=0.0, elapsed=float(index + 1), stop=stop, text="x",
    )  # fmt: skip


class TimedPair:
    """A pair whose generation waits 2 s (fake) before its first round and 1 s before each later one."""

    def __init__(self, clock: FakeClock, rounds: int) -> None:
        self.clock, self.rounds = clock, rounds

    def stream(self, prompt_ids, settings):
        for i in range(self.rounds):
            self.clock.now += 2.0 if i == 0 else 1.0
            yield _round(i, StopReason.MAX_NEW_TOKENS if i == self.rounds - 1 else None)


def test_time_to_first_token_is_taken_at_the_first_round_not_the_last():
    """A job that waits 0.5 s in line, then rounds at +2, +3, +4, +5 s: time to first token is 2.5 s from
    its arrival, the whole request 5.5 s, its queue time 0.5 s. Catches the first-token time taken at
    the last round (5.5), at the generation's start (0.5), or from another clock."""
    clock, outcomes = FakeClock(), []
    worker = Worker(TimedPair(clock, rounds=4), max_queue=4, on_finish=outcomes.append, clock=clock)

    async def serve_one() -> Finished:
        job = Job("cmpl-1", "completions", [1, 2], resolve_settings(), asyncio.get_running_loop())
        job.arrived = clock()
        clock.now += 0.5  # in line before the worker takes it
        worker.submit(job)
        worker.start()
        events = [event async for event in job.events()]
        worker.close()
        return events[-1]

    finished = asyncio.run(serve_one())
    worker.join(10)
    outcome = finished.outcome
    assert finished.status == 200 and outcomes == [outcome] and outcome.stats.rounds == 4
    assert outcome.queue_time == pytest.approx(0.5)
    assert outcome.first_token_time == pytest.approx(2.5)
    assert outcome.total_time == pytest.approx(5.5)
