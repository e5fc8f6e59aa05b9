"""Incremental decoding: characters split across byte-level tokens appear once, complete."""

from __future__ import annotations

import pytest

from specli.text import IncrementalDecoder

SAMPLES = ["Hôm nay trời rất đẹp", "rocket 🚀 and smile 🙂!", "東京は晴れです。", "def f(x):\n    return x"]


@pytest.mark.parametrize("text", SAMPLES)
@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_pieces_concatenate_to_the_text_without_replacement_chars(tokenizer, text, chunk):
    ids = tokenizer.encode(text)
    assert len(ids) > 1
    decoder = IncrementalDecoder(tokenizer)
    pieces = [decoder.push(ids[i : i + chunk]) for i in range(0, len(ids), chunk)] + [decoder.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)


def test_a_split_character_is_held_back_until_complete(tokenizer):
    ids = tokenizer.encode("🚀")
    assert len(ids) > 1, "the emoji must span several byte tokens for this test"
    decoder = IncrementalDecoder(tokenizer)
    assert decoder.push(ids[:-1]) == ""
    assert decoder.push(ids[-1:]) == "🚀"


def test_special_tokens_are_skipped(tokenizer):
    decoder = IncrementalDecoder(tokenizer)
    assert decoder.push(tokenizer.encode("ab") + [tokenizer.eos_token_id]) + decoder.flush() == "ab"
