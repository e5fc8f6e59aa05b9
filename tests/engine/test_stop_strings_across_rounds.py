"""Stop strings completed in a later round than they began, over byte-level tokens
(specli/engine/stopping.py).

A byte-level BPE may split one character into several single-byte tokens, so the tail decoded again each
round must be counted in tokens, up to 4 per character of the longest stop string.
"""

from __future__ import annotations

from specli.engine.stopping import StopCriteria, StopReason


def _decode(ids: list[int]) -> str:
    """One token per byte: the finest split a byte-level tokenizer can make."""
    return bytes(ids).decode("utf-8", errors="replace")


def test_a_stop_string_whose_bytes_span_rounds_is_found_where_it_completes():
    """Bug caught: the look-back counted characters as tokens, so a one-character stop string of four
    byte tokens, three of them committed in earlier rounds, was missed when its last byte came."""
    stop = "🙂"  # one character, four UTF-8 bytes
    criteria = StopCriteria(set(), [stop], _decode)
    emoji = list(stop.encode())
    generated = list(b"ok ") + emoji[:3]  # earlier rounds: no stop string yet
    assert criteria.cut([], generated) is None
    new = [emoji[3]] + list(b" more")  # this round completes it with its first token
    assert criteria.cut(generated, new) == (1, StopReason.STOP_STRING)
    assert criteria.commit(generated, new) == ([emoji[3]], StopReason.STOP_STRING)


def test_a_long_stop_string_of_multibyte_characters_split_over_many_rounds():
    """Bug caught: as above for a stop string of several characters, each of several bytes, whose
    bytes arrive one round at a time (every earlier tail still decodes without it)."""
    stop = "東京"  # two characters, six bytes
    criteria = StopCriteria(set(), [stop], _decode)
    text = list("→ ".encode()) + list(stop.encode())
    generated: list[int] = []
    for i, token in enumerate(text):
        hit = criteria.cut(generated, [token])
        if i < len(text) - 1:
            assert hit is None, i
        else:
            assert hit == (1, StopReason.STOP_STRING)
        generated.append(token)
