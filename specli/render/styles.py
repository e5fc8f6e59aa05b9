"""How each token kind looks. Colours from the Okabe-Ito palette (distinguishable with the common colour-
vision deficiencies), and every kind also differs by text style, so NO_COLOR output still tells them apart."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from specli.events import TokenKind

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
