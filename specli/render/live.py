"""The live terminal view of `specli generate`: committed text coloured by token kind, the current
round's rejected drafts struck through, a status line and a legend. Consumes Round events only."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from specli.events import Round, Stats, TokenKind
from specli.render.plain import strategy_label
from specli.render.styles import KIND_STYLES, legend, visible
from specli.text import IncrementalDecoder, continuation_text

CONTEXT_IDS = 8  # committed ids decoded before rejected drafts, for leading spaces and merges


class TokenView:
    """The state the view shows: styled committed text, the last round's rejected drafts, stats."""

    def __init__(self, tokenizer: Any, strategy: str, k: int | None) -> None:
        self.tokenizer = tokenizer
        self.strategy = strategy
        self.k = k
        self.decoder = IncrementalDecoder(tokenizer)
        self.text = Text()
        self.stats = Stats()
        self.last: Round | None = None
        self._rejected = Text()
        self._split = 0  # where the rejected drafts sit in self.text: before the last correction

    def add(self, r: Round) -> None:
        self.stats.observe(r)
        self.last = r
        context = self.decoder.ids[-CONTEXT_IDS:] + r.committed[: r.accepted]
        for token, kind in zip(r.committed, r.committed_kinds, strict=True):
            if kind is TokenKind.CORRECTION:
                self._split = len(self.text)
            piece = self.decoder.push([token])
            if piece:
                self.text.append(visible(piece), KIND_STYLES[kind])
        self._rejected = Text()
        if r.rejected and r.kind is TokenKind.CORRECTION:
            shown = continuation_text(self.tokenizer, context[-CONTEXT_IDS:], r.rejected)
            self._rejected = Text(visible(shown), KIND_STYLES[TokenKind.REJECTED])

    def finish(self) -> None:
        """Flush an incomplete character at the end and drop the struck-through drafts."""
        tail = self.decoder.flush()
        if tail:
            kind = self.last.committed_kinds[-1] if self.last and self.last.committed else TokenKind.BONUS
            self.text.append(visible(tail), KIND_STYLES[kind])
        self._rejected = Text()

    def body(self) -> Text:
        """Committed text with the last round's rejected drafts struck through where they were rejected."""
        if not self._rejected:
            return self.text.copy()
        return Text.assemble(self.text[: self._split], self._rejected, self.text[self._split :])

    def status(self) -> Text:
        s, r = self.stats, self.last
        parts = [strategy_label(self.strategy, self.k)]
        parts.append(f"round {s.rounds}")
        if r is not None and self.strategy != "none":
            parts.append(f"drafted {len(r.drafted)} accepted {r.accepted}")
        if s.drafted:
            parts.append(f"acceptance {s.acceptance_rate:.1%}")
        parts.append(f"mean acceptance length {s.mean_acceptance_length:.2f}")
        parts.append(f"{s.tokens} tokens · {s.tokens_per_second:.1f} tok/s · {s.elapsed:.1f}s")
        return Text(" · ".join(parts), style="bold")

    def legend(self) -> Text:
        if self.strategy == "none":
            return Text.assemble(("plain decoding: ", "dim"), legend((TokenKind.BONUS,)))
        return legend((TokenKind.ACCEPTED, TokenKind.REJECTED, TokenKind.CORRECTION, TokenKind.BONUS))

    def renderable(self, max_lines: int | None = None) -> Group:
        body = self.body()
        if max_lines is not None:
            lines = body.split("\n", allow_blank=True)
            if len(lines) > max_lines:
                body = Text("\n").join(lines[-max_lines:])
        return Group(body, Text(""), self.status(), self.legend())


class LiveView:
    """Drives a Rich Live display of a TokenView; the final state is printed in full when it stops."""

    def __init__(self, view: TokenView, console: Console) -> None:
        self.view = view
        self.console = console
        self._live = Live(console=console, auto_refresh=False, transient=True, get_renderable=self._window)

    def _window(self) -> Group:
        height = self.console.size.height
        return self.view.renderable(max_lines=max(3, height - 4))

    def __enter__(self) -> LiveView:
        self._live.start()
        return self

    def round(self, r: Round) -> None:
        self.view.add(r)
        self._live.refresh()

    def __exit__(self, *exc: object) -> None:
        self.view.finish()
        self._live.stop()
        self.console.print(self.view.renderable())
