"""The one generation worker: a thread that serves jobs one at a time, in arrival order (batch size 1).

Requests wait in a bounded FIFO line: `submit` refuses a job (QueueFull) when `max_queue` are already
waiting behind the running one. The worker consumes `Pair.stream` only (losslessness stays the
engine's), hands each verified Round to the job's asyncio queue as it comes, and checks the job's cancel
flag between rounds, so a client that leaves stops its generation within one round. torch runs on this
thread only; the event loop never waits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specli.engine.events import Round, Stats
from specli.errors import UsageError
from specli.serve.errors import one_line
from specli.serve.report import Outcome, finish_reason

if TYPE_CHECKING:
    from specli.pair import Pair
    from specli.settings import Settings


class QueueFull(Exception):
    """The line is full."""


class ShuttingDown(Exception):
    """The server is stopping and takes no more work."""


@dataclass(frozen=True)
class Finished:
    """The last event of a job. status: 200, or the HTTP status its error maps to (400 for a usage
    error the models found, 500 for a failure, 503 when the server shut down under it)."""

    outcome: Outcome
    status: int = 200


@dataclass
class Job:
    """One request's generation. Created on the event loop; its events arrive on `inbox`."""

    request_id: str
    endpoint: str
    prompt_ids: list[int]
    settings: Settings
    loop: asyncio.AbstractEventLoop
    inbox: asyncio.Queue = field(default_factory=asyncio.Queue)
    arrived: float = field(default_factory=time.perf_counter)
    _cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = "client disconnected"

    def cancel(self, reason: str = "client disconnected") -> None:
        """Stop at the next round boundary (or never start). Safe from any thread."""
        if not self._cancel.is_set():
            self.cancel_reason = reason
            self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def deliver(self, event: Round | Finished) -> None:
        """From the worker thread: queue the event on the job's loop (dropped if the loop is gone)."""
        with contextlib.suppress(RuntimeError):  # RuntimeError: the event loop has closed (shutdown)
            self.loop.call_soon_threadsafe(self.inbox.put_nowait, event)

    async def events(self) -> AsyncIterator[Round | Finished]:
        """The job's rounds as they are verified, then one Finished."""
        while True:
            event = await self.inbox.get()
            yield event
            if isinstance(event, Finished):
                return


SHUTDOWN = "server shutting down"


class Worker:
    """Serves submitted jobs one at a time on a thread of its own; `on_finish(outcome)` after each.
    clock: the time source of the outcomes' times (the jobs' `arrived` must come from the same one)."""

    def __init__(
        self,
        pair: Pair,
        max_queue: int,
        on_finish: Callable[[Outcome], Any],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.pair = pair
        self.max_queue = max_queue
        self.on_finish = on_finish
        self.clock = clock
        self._lock = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._running: Job | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="specli-generation", daemon=True)

    # --- the event loop's side ------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Put `job` in line; QueueFull when max_queue jobs already wait behind a running one."""
        with self._lock:
            if self._closed:
                raise ShuttingDown
            busy = len(self._waiting) + (self._running is not None)
            if busy > self.max_queue:
                raise QueueFull
            self._waiting.append(job)
            self._lock.notify()

    def close(self) -> None:
        """Take no more jobs; cancel the running one and everything waiting (they finish at once)."""
        with self._lock:
            self._closed = True
            for job in [*self._waiting, *([self._running] if self._running else [])]:
                job.cancel(SHUTDOWN)
            self._lock.notify()

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def running(self) -> int:
        return int(self._running is not None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    # --- the worker thread ------------------------------------------------------------------------
    def _next(self) -> Job | None:
        with self._lock:
            while not self._waiting and not self._closed:
                self._lock.wait()
            if not self._waiting:
                return None
            self._running = self._waiting.popleft()
            return self._running

    def _run(self) -> None:
        try:
            while (job := self._next()) is not None:
                finished = self._serve(job)
                with self._lock:
                    self._running = None
                self._finish(job, finished)
        finally:  # only a bug ends the loop early: no job may wait for an answer that never comes
            self._abandon()

    def _finish(self, job: Job, finished: Finished) -> None:
        # on_finish before the answer, so a client that then reads /metrics sees it; trouble there
        # (metrics, console) must not stop the worker
        with contextlib.suppress(Exception):
            self.on_finish(finished.outcome)
        job.deliver(finished)

    def _abandon(self) -> None:
        """Close, and answer every job still running or waiting with a failure."""
        with self._lock:
            self._closed = True
            left = [*([self._running] if self._running else []), *self._waiting]
            self._running, self._waiting = None, deque()
        for job in left:
            outcome = _outcome(job, Stats(), "error", self.clock(), "the generation worker stopped")
            job.deliver(Finished(outcome, 500))

    def _serve(self, job: Job) -> Finished:
        """Run the job's rounds; the outcome, never an exception. Time to first token is taken when the
        first round arrives."""
        stats, started, first, error, status = Stats(), self.clock(), None, None, 200
        cut = job.cancelled
        if not cut:
            rounds = None
            try:  # stream() checks the settings before its first round: that can raise too
                rounds = self.pair.stream(prompt_ids=job.prompt_ids, settings=job.settings)
                for r in rounds:
                    stats.observe(r)
                    if first is None:
                        first = self.clock()
                    job.deliver(r)
                    if job.cancelled:
                        cut = True
                        break
            except UsageError as e:
                error, status = e.message, 400
            except Exception as e:  # a failure inside generation: one line, and the next job runs
                error, status = one_line(e), 500
            finally:
                if rounds is not None and hasattr(rounds, "close"):
                    rounds.close()  # ends the engine's generator now, not at garbage collection
        if error is not None:
            reason = "error"
        elif cut:
            reason, error = "abort", job.cancel_reason
            status = 503 if job.cancel_reason == SHUTDOWN else 499
        else:
            reason = finish_reason(stats)
        return Finished(_outcome(job, stats, reason, self.clock(), error, started, first), status)


def _outcome(
    job: Job,
    stats: Stats,
    reason: str,
    end: float,
    error: str | None = None,
    started: float | None = None,
    first: float | None = None,
) -> Outcome:
    """A finished job's Outcome; times from its arrival (started: when its generation began, first: when
    its first round arrived, end: now)."""
    s = job.settings
    return Outcome(
        request_id=job.request_id,
        endpoint=job.endpoint,
        prompt_tokens=len(job.prompt_ids),
        stats=stats,
        finish_reason=reason,
        strategy=s.strategy,
        num_draft_tokens=s.num_draft_tokens,
        exit_layer=s.exit_layer,
        queue_time=(end if started is None else started) - job.arrived,
        first_token_time=None if first is None else first - job.arrived,
        total_time=end - job.arrived,
        error=error,
    )
