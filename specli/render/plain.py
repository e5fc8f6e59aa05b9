"""Plain output: committed text streamed to a file, and the words for what one round drafted (the
one-line summary of a generation is `specli.wording.summary_line`)."""

from __future__ import annotations

from typing import TextIO

from specli.engine.events import Round


def draft_words(r: Round, separator: str = " · ") -> str:
    """What one round drafted, for the explain panel's title and the live status line: 'k 4 (cost
    model) · drafted 3 · accepted 2' (the k the round allowed and why, when it says). A lookup round
    whose n-gram matched nothing says so ('k 16: no n-gram matched, drafted nothing'); one whose match
    ran out before k drafted says that ('k 16 (the match ran out) · drafted 5 · accepted 3'). A tree
    round names its nodes and depth instead of the drafted count ('k 4 (cost model) · nodes 16 · depth 4
    · accepted 3': accepted is the length of the kept path)."""
    if r.draft_reason == "match" and not r.drafted:
        return f"k {r.draft_limit}: no n-gram matched, drafted nothing"
    reason = "the match ran out" if r.draft_reason == "match" else r.draft_reason
    limit = f"k {r.draft_limit} ({reason}){separator}" if reason else ""
    if r.tree is not None:
        return f"{limit}nodes {r.nodes}{separator}depth {r.tree.depth}{separator}accepted {r.accepted}"
    return f"{limit}drafted {len(r.drafted)}{separator}accepted {r.accepted}"


class PlainWriter:
    """Streams each round's text (`Round.text`, decoded once by `Pair.stream`: complete characters only)
    to `out` as it arrives: committed text only, so a tree round's refused nodes (like a chain's rejected
    drafts) never reach it."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def round(self, r: Round) -> None:
        if r.text:
            self.out.write(r.text)
            self.out.flush()
