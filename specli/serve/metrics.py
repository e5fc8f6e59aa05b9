"""Prometheus metrics, one registry per app (nothing module-level), named as vLLM names them under
`specli:`. prometheus_client adds `_total` to counters, so the exposed names are:

    specli:spec_decode_num_drafts_total                     rounds that drafted >= 1 token
    specli:spec_decode_num_draft_tokens_total               drafted tokens sent to the target
                                                            (those after a rejection included)
    specli:spec_decode_num_accepted_tokens_total            drafted tokens kept (bonus excluded)
    specli:spec_decode_num_accepted_tokens_per_pos_total{position="i"}   kept at draft position i (0-based)
    specli:prompt_tokens_total, specli:generation_tokens_total
    specli:request_success_total{finished_reason="stop|length|abort|error"}
    specli:e2e_request_latency_seconds, specli:time_to_first_token_seconds,
    specli:request_queue_time_seconds                       histograms (arrival -> end / first round /
                                                            generation start)
    specli:num_requests_running, specli:num_requests_waiting   gauges

The spec_decode counters are the sums of the per-response `spec_decode` objects (report.py), including
requests a client abandoned (their rounds ran).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specli.serve.report import Outcome

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, float("inf"))
FINISH_REASONS = ("stop", "length", "abort", "error")


class Metrics:
    """The app's metrics; `observe(outcome)` once per finished request (thread-safe)."""

    def __init__(self, k: int, running: Callable[[], int], waiting: Callable[[], int]) -> None:
        self.registry = registry = CollectorRegistry()
        prefix = "specli:spec_decode_"
        self.drafts = Counter(
            f"{prefix}num_drafts", "Rounds that drafted at least one token.", registry=registry
        )
        self.draft_tokens = Counter(
            f"{prefix}num_draft_tokens",
            "Drafted tokens sent to the target, including those after a rejection, which it never judged.",
            registry=registry,
        )
        self.accepted = Counter(
            f"{prefix}num_accepted_tokens",
            "Drafted tokens the target kept (bonus and correction tokens excluded).",
            registry=registry,
        )
        self.per_position = Counter(
            f"{prefix}num_accepted_tokens_per_pos",
            "Rounds whose draft at this position (0-based) was kept.",
            ["position"],
            registry=registry,
        )
        for position in range(k):  # every position shows from the start, at 0
            self.per_position.labels(position=str(position))
        self.prompt_tokens = Counter("specli:prompt_tokens", "Prompt tokens processed.", registry=registry)
        self.generation_tokens = Counter(
            "specli:generation_tokens", "Tokens generated (committed).", registry=registry
        )
        self.requests = Counter(
            "specli:request_success",
            "Finished requests by finish reason.",
            ["finished_reason"],
            registry=registry,
        )
        for reason in FINISH_REASONS:
            self.requests.labels(finished_reason=reason)
        self.e2e = Histogram(
            "specli:e2e_request_latency_seconds",
            "Arrival to last token.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.ttft = Histogram(
            "specli:time_to_first_token_seconds",
            "Arrival to the first verified round.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue = Histogram(
            "specli:request_queue_time_seconds",
            "Arrival to generation start (waiting in line).",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        Gauge("specli:num_requests_running", "Requests generating (0 or 1).", registry=registry).set_function(
            running
        )
        Gauge("specli:num_requests_waiting", "Requests waiting in line.", registry=registry).set_function(
            waiting
        )

    def observe(self, outcome: Outcome) -> None:
        stats = outcome.stats
        self.drafts.inc(stats.drafts)
        self.draft_tokens.inc(stats.drafted)
        self.accepted.inc(stats.accepted)
        for position, kept in enumerate(stats.position_accepted):
            self.per_position.labels(position=str(position)).inc(kept)
        self.prompt_tokens.inc(outcome.prompt_tokens if stats.rounds else 0)
        self.generation_tokens.inc(stats.tokens)
        self.requests.labels(finished_reason=outcome.finish_reason).inc()
        self.queue.observe(outcome.queue_time)
        if outcome.first_token_time is not None:
            self.ttft.observe(outcome.first_token_time)
        if outcome.finish_reason in ("stop", "length"):
            self.e2e.observe(outcome.total_time)

    def exposition(self) -> bytes:
        """The Prometheus text format."""
        return generate_latest(self.registry)
