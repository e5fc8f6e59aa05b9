"""The live terminal view of `specli generate`: committed text coloured by token kind, the current
round's rejected drafts struck through (a chain's only: a token tree's refused nodes are branches, not
one continuation, and the status line gives the tree's node count instead), a status line and a legend;
the final frame says why generation stopped. Every line fits the terminal's width: the status line and
the legend break between their parts (never inside one), the text wraps between words. Consumes Round
events only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.measure import Measurement
from rich.segment import Segment
from rich.text import Text

from specli.engine.events import Round, Stats, TokenKind
from specli.render.plain import draft_words
from specli.render.styles import KIND_LABELS, KIND_STYLES, visible
from specli.strategies import Strategy
from specli.text import IncrementalDecoder, continuation_text
from specli.wording import count, drafter_note, stop_text, strategy_label

CONTEXT_IDS = 8  # committed ids decoded before rejected drafts, for leading spaces and merges


class Packed:
    """Parts on as few lines as the width allows, joined by `separator`; a line breaks only between two
    parts, so no number or word is ever cut or split (a part wider than the line wraps on its own)."""

    def __init__(self, parts: Iterable[Text], separator: str = " · ", style: str = "") -> None:
        self.parts = [p for p in parts if p]
        self.separator = separator
        self.style = style

    def lines(self, width: int) -> list[Text]:
        lines: list[Text] = []
        line = Text(style=self.style)
        for part in self.parts:
            if line and line.cell_len + len(self.separator) + part.cell_len > width:
                lines.append(line)
                line = Text(style=self.style)
            if line:
                line.append(self.separator)
            line.append_text(part)
        return [*lines, line]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.lines(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max((p.cell_len for p in self.parts), default=0)
        return Measurement(widest, self.lines(1 << 30)[0].cell_len)


class Frame:
    """The body above a footer (status, stop reason, legend); with `height`, only the body's last lines
    that leave room for the whole footer, counted after wrapping at the console's width."""

    def __init__(self, body: Text, footer: list[Any], height: int | None = None) -> None:
        self.body, self.footer, self.height = body, footer, height

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        footer = console.render_lines(Group(*self.footer), options, pad=False)
        body = console.render_lines(self.body, options, pad=False)
        if self.height is not None:
            body = body[-max(1, self.height - len(footer)) :]
        for line in [*body, *footer]:
            yield from line
            yield Segment.line()


class TokenView:
    """The state the view shows: styled committed text, the last round's rejected drafts, stats."""

    def __init__(self, tokenizer: Any, strategy: str, k: int | None, prompt: str = "") -> None:
        self.tokenizer = tokenizer
        self.prompt = Text(visible(prompt), "dim") if prompt else Text()  # shown above the output
        self.strategy = strategy
        self.k = k
        self.decoder = IncrementalDecoder(tokenizer)
        self.text = Text()
        self.stats = Stats()
        self.last: Round | None = None
        self._rejected = Text()
        self._split = 0  # where the rejected drafts sit in self.text: before the last correction
        self.interrupted = False  # set when Ctrl-C stopped generation: the final frame says so
        self.drafter_note = ""  # e.g. "EAGLE-3 on layers 2,4,5", from the rounds' info
        self.compiled: str | None = None  # "compiled in 41.0s (cached for next runs)" with --compile

    def add(self, r: Round) -> None:
        self.stats.observe(r)
        self.last = r
        note = drafter_note(r.info or {})  # which head on which target layers; parallel drafting
        if note:
            self.drafter_note = note
        context = self.decoder.ids[-CONTEXT_IDS:] + r.committed[: r.accepted]
        for token, kind in zip(r.committed, r.committed_kinds, strict=True):
            if kind is TokenKind.CORRECTION:
                self._split = len(self.text)
            piece = self.decoder.push([token])
            if piece:
                self.text.append(visible(piece), KIND_STYLES[kind])
        self._rejected = Text()
        # A chain's rejected drafts are one continuation, struck through where they were refused; a
        # tree's refused nodes are several branches, so only the status line counts them.
        if r.tree is None and r.rejected and r.kind is TokenKind.CORRECTION:
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

    def status(self) -> Packed:
        """Strategy, round, this round's drafts (a tree round: its nodes and depth, `draft_words`),
        acceptance, mean acceptance length, tokens, tok/s and elapsed, broken into lines between parts to
        fit the width."""
        s, r = self.stats, self.last
        label = strategy_label(self.strategy, self.k)
        if self.drafter_note:
            label += f" ({self.drafter_note})"
        parts = [label, f"round {s.rounds}"]
        if r is not None and self.strategy != Strategy.NONE:
            parts.append(draft_words(r, separator=" "))
        if s.drafted:
            parts.append(f"acceptance {s.acceptance_rate:.1%}")
        parts.append(f"mean acceptance length {s.mean_acceptance_length:.2f}")
        if self.compiled:
            parts.append(self.compiled)
        parts += [count(s.tokens, "token"), f"{s.tokens_per_second:.1f} tok/s", f"{s.elapsed:.1f}s"]
        return Packed((Text(p) for p in parts), style="bold")

    def stop_line(self) -> Text | None:
        """Why generation ended ('stopped after 3 tokens: a stop string was generated'), once it has."""
        text = stop_text(self.stats.stop_reason, self.stats.tokens, self.interrupted)
        return Text(text, style="bold") if text else None

    def legend(self) -> Packed:
        if self.strategy == Strategy.NONE:
            kinds: tuple[TokenKind, ...] = (TokenKind.BONUS,)
            head = [Text("plain decoding:", "dim")]
        else:
            kinds = (TokenKind.ACCEPTED, TokenKind.REJECTED, TokenKind.CORRECTION, TokenKind.BONUS)
            head = []
        return Packed([*head, *(Text(KIND_LABELS[k], KIND_STYLES[k]) for k in kinds)], separator="  ")

    def renderable(self, max_lines: int | None = None) -> Frame:
        """The frame: body, a blank line, status, the stop reason (once stopped) and the legend. With
        `max_lines`, the whole frame is at most that many lines (the body's tail is kept)."""
        footer: list[Any] = [Text(""), self.status()]
        stop = self.stop_line()
        if stop is not None:
            footer.append(stop)
        footer.append(self.legend())
        return Frame(Text.assemble(self.prompt, self.body()), footer, max_lines)


class LiveView:
    """Drives a Rich Live display of a TokenView; the final state is printed in full when it stops."""

    def __init__(self, view: TokenView, console: Console) -> None:
        self.view = view
        self.console = console
        self._live = Live(console=console, auto_refresh=False, transient=True, get_renderable=self._window)

    def _window(self) -> Frame:
        return self.view.renderable(max_lines=max(3, self.console.size.height - 1))

    def __enter__(self) -> LiveView:
        self._live.start()
        return self

    def round(self, r: Round) -> None:
        self.view.add(r)
        self._live.refresh()

    def __exit__(self, *exc: object) -> None:
        self.view.finish()
        self._live.stop()
        self.console.print(self.view.renderable(), soft_wrap=False)  # wrapped between words
