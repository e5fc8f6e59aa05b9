"""What the command line reads from the user besides options: the prompt text (an argument, stdin or a
file, which must be UTF-8) and, for `explain --step`, the keys between rounds (from the terminal, never
from a stdin that held the prompt).

No torch here: everything in this module runs before any model loads, so bad input fails at once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, Any

from specli.errors import UsageError

STEP_HINT = "press Enter for the next round, q to stop"


def _not_utf8(where: str, byte: int, offset: int) -> UsageError:
    return UsageError(
        f"{where} is not UTF-8: byte 0x{byte:02x} at offset {offset}.",
        "Convert it to UTF-8 first, e.g. `iconv -f latin1 -t utf-8`.",
    )


def decode_prompt(data: bytes, where: str = "the prompt on stdin") -> str:
    """Bytes (stdin) -> text, strictly UTF-8; newlines normalised as text-mode reading would."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(where, data[e.start], e.start) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def check_text(text: str, where: str) -> str:
    """An argument as Python received it: bytes that were not UTF-8 arrive as lone surrogates
    (argv is decoded with surrogateescape); name the first such byte and its byte offset."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        char = ord(text[e.start])
        byte = char - 0xDC00 if 0xDC80 <= char <= 0xDCFF else char  # an escaped byte, else a bare surrogate
        offset = len(text[: e.start].encode("utf-8", "surrogateescape"))
        raise _not_utf8(where, byte, offset) from None
    return text


def read_prompt(prompt: str, stdin: IO[str] | None = None) -> str:
    """The prompt argument, or stdin for '-' (one trailing newline, as `echo` adds, is dropped)."""
    if prompt != "-":
        return check_text(prompt, "the prompt")
    stdin = stdin if stdin is not None else sys.stdin
    raw = getattr(stdin, "buffer", None)
    text = decode_prompt(raw.read()) if raw is not None else check_text(stdin.read(), "the prompt on stdin")
    return text[:-1] if text.endswith("\n") else text


def read_prompt_file(path: str, stdin: IO[str] | None = None) -> str:
    """`--prompt-file PATH`: the file's text, strictly UTF-8 (a leading byte-order mark dropped), and like
    stdin one trailing newline (an editor's) dropped; '-' reads stdin. UsageError when it cannot be read
    or holds no text."""
    if path == "-":
        return read_prompt("-", stdin)
    shown = check_text(path, "the --prompt-file path")
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as e:
        raise UsageError(
            f"cannot read the prompt file '{shown}': {e.strerror or e}.",
            "Give --prompt-file a readable text file, or the prompt itself as the argument.",
        ) from None
    text = decode_prompt(data.removeprefix(b"\xef\xbb\xbf"), f"the prompt file '{shown}'")
    text = text[:-1] if text.endswith("\n") else text
    if not text:
        raise UsageError(f"the prompt file '{shown}' is empty.", "Write the prompt into it first.")
    return text


def prompt_text(prompt: str | None, prompt_file: str | None, stdin: IO[str] | None = None) -> str:
    """The prompt a command runs on: the PROMPT argument ('-': stdin) or --prompt-file, exactly one of
    them (UsageError for neither or both)."""
    if prompt is not None and prompt_file is not None:
        raise UsageError(
            "the prompt is given twice: as an argument and with --prompt-file.", "Give one of them."
        )
    if prompt_file is not None:
        return read_prompt_file(prompt_file, stdin)
    if prompt is None:
        raise UsageError(
            "no prompt given.", "Give it as the argument, '-' to read it from stdin, or --prompt-file FILE."
        )
    return read_prompt(prompt, stdin)


class StepKeys:
    """The keys `explain --step` waits for between rounds, read from the terminal.

    stdin is used when it is a terminal and did not carry the prompt; otherwise /dev/tty. Without a
    terminal, constructing one raises a UsageError (before any model loads). `next_round()` shows the
    hint, waits for one key (Enter or any other key: go on; q, or end of input: stop) and clears the hint.
    """

    def __init__(self, prompt_on_stdin: bool) -> None:
        self._own: IO[Any] | None = None
        if not prompt_on_stdin and _isatty(sys.stdin):
            self.fd = sys.stdin.fileno()
        else:
            try:
                self._own = open("/dev/tty", "rb+", buffering=0)  # noqa: SIM115 (closed in close())
            except OSError:
                raise UsageError(
                    "--step needs a terminal to read Enter from, and none is attached"
                    + (" (stdin holds the prompt)." if prompt_on_stdin else "."),
                    "Run without --step (--pace SECONDS paces the rounds), or from a terminal.",
                ) from None
            self.fd = self._own.fileno()

    def next_round(self) -> bool:
        """Show the hint, wait for a key; True to go on, False to stop."""
        self._write(f"\x1b[2m{STEP_HINT}\x1b[0m")
        try:
            key = self._read_key()
        finally:
            self._write("\r\x1b[2K")  # the hint goes away once answered
        return key not in (b"", b"q", b"Q")

    def _write(self, text: str) -> None:
        sys.stdout.flush()
        os.write(self.fd, text.encode())

    def _read_key(self) -> bytes:
        """One key without waiting for Enter when the terminal allows (cbreak: Ctrl-C still interrupts)."""
        try:
            import termios
            import tty
        except ImportError:  # not a POSIX terminal: read a line
            return self._read_line()
        try:
            saved = termios.tcgetattr(self.fd)
        except termios.error:
            return self._read_line()
        try:
            tty.setcbreak(self.fd)
            return os.read(self.fd, 1)
        finally:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, saved)

    def _read_line(self) -> bytes:
        data = os.read(self.fd, 1024)
        return data.strip()[:1] or (b"\n" if data else b"")  # b"": end of input

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None


def _isatty(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False
