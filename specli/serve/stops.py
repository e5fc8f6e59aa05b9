"""Stop strings the OpenAI way: the returned text ends *before* the stop string.

The engine stops on the token that completes a stop string and keeps the string (as transformers does);
`StopTrimmer` holds back any tail that could be the start of a stop string, so a streamed chunk never
shows text that a stop would later cut, and drops the string and what follows it at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class StopTrimmer:
    """Feed each round's text to `push`, then call `finish`; the pieces joined are the answer."""

    stops: Sequence[str] = ()
    _held: str = field(default="", init=False)

    def push(self, text: str) -> str:
        """What of `text` can be shown now (all of it without stop strings)."""
        if not self.stops:
            return text
        self._held += text
        cut = self._first_stop()
        if cut is not None:  # shown at finish, cut there
            return ""
        keep = self._partial_tail()
        shown, self._held = self._held[: len(self._held) - keep], self._held[len(self._held) - keep :]
        return shown

    def finish(self) -> str:
        """The rest, cut before the first stop string."""
        held, self._held = self._held, ""
        cut = self._first_stop_in(held)
        return held if cut is None else held[:cut]

    def _first_stop(self) -> int | None:
        return self._first_stop_in(self._held)

    def _first_stop_in(self, text: str) -> int | None:
        found = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        return min(found) if found else None

    def _partial_tail(self) -> int:
        """Length of the longest tail of the held text that begins some stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(self._held)), best, -1):
                if self._held.endswith(stop[:n]):
                    best = n
                    break
        return best
