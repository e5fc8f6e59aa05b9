"""Plain output: committed text streamed to a file, a one-line summary for stderr."""

from __future__ import annotations

from typing import TextIO

from specli.events import Round, Stats
from specli.render.words import count


def strategy_label(strategy: str, k: int | None = None) -> str:
    """The views' header: the strategy, and k when it drafts, e.g. "draft k=4" or "none"."""
    return strategy + (f" k={k}" if k and strategy != "none" else "")


def summary_line(
    stats: Stats,
    strategy: str,
    k: int | None = None,
    exit_layer: int | None = None,
    compiled: str | None = None,
) -> str:
    """One line: rounds, acceptance rate, mean acceptance length, tokens/s (and `self`'s exit layer);
    `compiled` ("compiled in 41.0s ...") comes before the tokens/s, which never include it."""
    label = strategy_label(strategy, k)
    if strategy == "self" and exit_layer is not None:
        label += f" exit layer {exit_layer}"
    parts = [label, count(stats.rounds, "round")]
    if compiled:
        parts.append(compiled)
    if stats.drafted:
        parts += [
            f"acceptance {stats.acceptance_rate:.1%} ({stats.accepted}/{stats.drafted})",
            f"mean acceptance length {stats.mean_acceptance_length:.2f}",
        ]
    tokens = count(stats.tokens, "token")
    parts.append(f"{tokens} in {stats.elapsed:.2f}s = {stats.tokens_per_second:.1f} tok/s")
    if stats.stop_reason is not None:
        parts.append(f"stop: {stats.stop_reason.value}")
    return " · ".join(parts)


class PlainWriter:
    """Streams each round's text (`Round.text`, decoded once by `Pair.stream`: complete characters only)
    to `out` as it arrives."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def round(self, r: Round) -> None:
        if r.text:
            self.out.write(r.text)
            self.out.flush()
