"""Where to cut a round's committed tokens: EOS ids and stop strings."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specli.engine.events import StopReason

Decode = Callable[[list[int]], str]


class StopCriteria:
    """Finds the first stop inside newly committed tokens.

    EOS: the EOS token itself is kept and what follows dropped (as transformers' generate does).
    Stop strings: generation ends with the token that completes the string; the string stays in the
    output (as transformers' `stop_strings`). Only a bounded tail is decoded per round.
    """

    def __init__(self, eos_ids: set[int], stop_strings: Sequence[str] = (), decode: Decode | None = None):
        if stop_strings and decode is None:
            raise ValueError("stop strings need a decode function")
        self.eos_ids = frozenset(eos_ids)
        self.stop_strings = tuple(s for s in stop_strings if s)
        self.decode = decode
        # a byte-level token may carry a single byte: 4 bytes per character bounds the tokens to look back
        self._lookback = 4 * max((len(s) for s in self.stop_strings), default=0) + 1

    def commit(self, generated: list[int], new: list[int]) -> tuple[list[int], StopReason | None]:
        """The part of `new` to commit and why generation stops there (None: it goes on)."""
        hit = self.cut(generated, new)
        return (new, None) if hit is None else (new[: hit[0]], hit[1])

    def cut(self, generated: list[int], new: list[int]) -> tuple[int, StopReason] | None:
        """generated: tokens committed before this round; new: this round's tokens.
        Returns (how many of `new` to keep, why) at the first stop, else None."""
        for i, tok in enumerate(new):
            if tok in self.eos_ids:
                end, reason = i + 1, StopReason.EOS
                break
        else:
            end, reason = len(new), None
        if self.stop_strings:
            hit = self._first_stop_string(generated, new[:end])
            if hit is not None:
                return hit, StopReason.STOP_STRING
        return (end, reason) if reason else None

    def _first_stop_string(self, generated: list[int], new: list[int]) -> int | None:
        # Earlier rounds held no stop string (generation would have ended), so the first prefix of
        # `new` whose decoded tail contains one is where the string completes.
        head = generated[-self._lookback :]
        if not new or not self._found(head + new):
            return None
        return next(i for i in range(1, len(new) + 1) if self._found(head + new[:i]))

    def _found(self, ids: list[int]) -> bool:
        text = self.decode(ids)
        return any(s in text for s in self.stop_strings)
