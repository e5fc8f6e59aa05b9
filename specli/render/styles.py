"""How each token kind looks. Colours from the Okabe-Ito palette (distinguishable with the common colour-
vision deficiencies), and every kind also differs by text style, so NO_COLOR output still tells them apart."""

from __future__ import annotations

import re

from rich.style import Style
from rich.text import Text

from specli.engine.events import TokenKind

KIND_STYLES: dict[TokenKind, Style] = {
    TokenKind.ACCEPTED: Style(color="#56B4E9"),  # sky blue, plain
    TokenKind.CORRECTION: Style(color="#E69F00", bold=True, underline=True),  # orange, bold underlined
    TokenKind.BONUS: Style(color="#009E73", bold=True, italic=True),  # bluish green, bold italic
    TokenKind.REJECTED: Style(color="#D55E00", strike=True, dim=True),  # vermillion, struck through
}

KIND_LABELS: dict[TokenKind, str] = {
    TokenKind.ACCEPTED: "accepted (draft kept)",
    TokenKind.CORRECTION: "correction (target's token at a rejection)",
    TokenKind.BONUS: "bonus (target's extra token)",
    TokenKind.REJECTED: "rejected draft",
}


def legend(kinds: tuple[TokenKind, ...] = tuple(TokenKind)) -> Text:
    """One line naming each kind in its own style."""
    text = Text()
    for i, kind in enumerate(kinds):
        if i:
            text.append("  ")
        text.append(KIND_LABELS[kind], style=KIND_STYLES[kind])
    return text


def visible(piece: str) -> str:
    """Token text as shown inline: newlines and tabs stay, other control characters become escapes."""
    return "".join(c if c in "\n\t" or c.isprintable() else repr(c)[1:-1] for c in piece)


SYMBOLS = {"\n": "↵", "\t": "⇥", "\r": "␍"}
LONG_RUN = 5  # a run of this many spaces or more is shown as '·×N'


def shown(piece: str, spaces: bool = False) -> str:
    """Token text on one line, whitespace made visible: newline ↵, tab ⇥, and with `spaces` each space
    as · (a run of LONG_RUN or more as '·×N'); other control characters become escapes. For whitespace
    that would otherwise be a blank line or an invisible column entry (explain)."""
    out = "".join(SYMBOLS.get(c) or (c if c.isprintable() else repr(c)[1:-1]) for c in piece)
    if not spaces:
        return out
    parts = []
    for chunk in re.split(r"( +)", out):
        if chunk.startswith(" "):
            chunk = f"·×{len(chunk)}" if len(chunk) >= LONG_RUN else "·" * len(chunk)
        parts.append(chunk)
    return "".join(parts)
