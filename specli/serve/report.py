"""What a request reports about its speculation: the `spec_decode` object and the console line.

`spec_decode` (on every response; on the last chunk of a stream):

    strategy                 the drafting strategy ("draft", "lookup", "self", "eagle", "none")
    num_draft_tokens         k, the most tokens a round drafts (0 for "none")
    rounds                   target verify steps (each commits >= 1 token)
    drafts                   rounds that drafted >= 1 token (vLLM's num_drafts)
    draft_tokens             drafted tokens sent to the target, those after a rejection included,
                             which it never judged (vLLM's num_draft_tokens)
    accepted_tokens          drafted tokens kept; bonus and correction tokens excluded (vLLM's meaning)
    accepted_per_position    [i] = rounds whose draft position i (0-based) was kept
    drafted_per_position     [i] = rounds that drafted position i (position 0: = drafts)
    acceptance_rate          accepted_tokens / draft_tokens (0.0 when nothing was drafted)
    mean_acceptance_length   τ = completion tokens / rounds, bonus and correction included (plain
                             decoding: 1.0). vLLM's "acceptance length" is 1 + accepted_tokens / drafts;
                             both follow from the counts above.

Per-position acceptance is accepted_per_position[i] / drafted_per_position[i] (specli's own
definition) or accepted_per_position[i] / drafts (vLLM's). The `/metrics` counters are the sums of
these objects over every request the server ran. drafts, draft_tokens, accepted_tokens and
accepted_per_position are the request's `Stats` counters (engine/counters.py's SpecCounters) under
vLLM's names; bench --endpoint reads them back into the same type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specli.engine.events import Stats, StopReason
from specli.strategies import Strategy
from specli.wording import count, summary_line


@dataclass(frozen=True)
class Outcome:
    """One request, finished: what the worker measured. finish_reason: stop | length | abort | error."""

    request_id: str
    endpoint: str
    prompt_tokens: int
    stats: Stats
    finish_reason: str
    strategy: str
    num_draft_tokens: int
    exit_layer: int | None
    queue_time: float  # arrival -> generation start (seconds)
    first_token_time: float | None  # arrival -> first round verified
    total_time: float  # arrival -> last round
    error: str | None = None


def finish_reason(stats: Stats) -> str:
    """OpenAI's finish_reason: "stop" at EOS or a stop string, "length" at max_tokens or the context."""
    return "stop" if stats.stop_reason in (StopReason.EOS, StopReason.STOP_STRING) else "length"


def spec_decode(stats: Stats, strategy: str, k: int) -> dict[str, Any]:
    """The request's `spec_decode` object (see the module docstring)."""
    return {
        "strategy": strategy,
        "num_draft_tokens": 0 if strategy == Strategy.NONE else k,
        "rounds": stats.rounds,
        "drafts": stats.drafts,
        "draft_tokens": stats.drafted,
        "accepted_tokens": stats.accepted,
        "accepted_per_position": list(stats.position_accepted),
        "drafted_per_position": list(stats.position_drafted),
        "acceptance_rate": stats.acceptance_rate,
        "mean_acceptance_length": stats.mean_acceptance_length,
    }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def console_line(outcome: Outcome) -> str:
    """One line per request: id, route, prompt size, then the generate command's summary (rounds,
    acceptance, τ, tokens and tok/s); the text itself is never printed."""
    head = f"{outcome.request_id} {outcome.endpoint} · prompt {count(outcome.prompt_tokens, 'token')}"
    if outcome.queue_time >= 0.01:
        head += f" · waited {outcome.queue_time:.2f}s"
    if outcome.finish_reason == "error":
        return f"{head} · failed: {outcome.error}"
    body = summary_line(outcome.stats, outcome.strategy, outcome.num_draft_tokens, outcome.exit_layer)
    if outcome.finish_reason == "abort":
        body += f" · cancelled ({outcome.error or 'client disconnected'})"
    return f"{head} · {body}"
