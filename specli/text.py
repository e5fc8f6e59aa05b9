"""Incremental detokenization: emit text only once the characters are complete."""

from __future__ import annotations

from typing import Any


class IncrementalDecoder:
    """Feed committed ids, get the newly completed text.

    A character split across tokens (byte-level BPE, SentencePiece byte fallback) decodes to U+FFFD
    until its last byte arrives; such text is held back. Decoding a short window that starts before the
    new tokens keeps leading-space markers and merges right. The pieces concatenate to decode(all ids).
    """

    def __init__(self, tokenizer: Any, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._prefix = 0  # start of the window re-decoded for context
        self._read = 0  # ids before this have been emitted

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, ids: list[int]) -> str:
        self.ids += ids
        seen = self._decode(self.ids[self._prefix : self._read])
        text = self._decode(self.ids[self._prefix :])
        if len(text) > len(seen) and not text.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self.ids)
            return text[len(seen) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character at the very end)."""
        seen = self._decode(self.ids[self._prefix : self._read])
        text = self._decode(self.ids[self._prefix :])
        self._prefix = self._read = len(self.ids)
        return text[len(seen) :]


def continuation_text(tokenizer: Any, context: list[int], ids: list[int]) -> str:
    """The text ids add after context (a few preceding ids give leading spaces and merges right); an
    incomplete character at the end is left out. For showing tokens that are never committed."""
    before = tokenizer.decode(list(context), skip_special_tokens=True)
    after = tokenizer.decode(list(context) + list(ids), skip_special_tokens=True)
    return after[len(before) :].rstrip("\ufffd") if after.startswith(before) else after.rstrip("\ufffd")
