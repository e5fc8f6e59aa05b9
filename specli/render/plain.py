"""Plain output: committed text streamed to a file, a one-line summary for stderr."""

from __future__ import annotations

from typing import TextIO

from specli.engine.events import Round, Stats
from specli.render.words import count


def strategy_label(strategy: str, k: int | None = None) -> str:
    """The views' header: the strategy, and k when it drafts, e.g. "draft k=4" or "none"."""
    return strategy + (f" k={k}" if k and strategy != "none" else "")


def draft_words(r: Round, separator: str = " · ") -> str:
    """What one round drafted, for the explain panel's title and the live status line: 'k 4 (cost
    model) · drafted 3 · accepted 2' (the k the round allowed and why, when it says). A lookup round
    whose n-gram matched nothing says so ('k 16: no n-gram matched, drafted nothing'); one whose match
    ran out before k drafted says that ('k 16 (the match ran out) · drafted 5 · accepted 3')."""
    if r.draft_reason == "match" and not r.drafted:
        return f"k {r.draft_limit}: no n-gram matched, drafted nothing"
    reason = "the match ran out" if r.draft_reason == "match" else r.draft_reason
    limit = f"k {r.draft_limit} ({reason}){separator}" if reason else ""
    return f"{limit}drafted {len(r.drafted)}{separator}accepted {r.accepted}"


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
