"""Errors a user can act on. The CLI prints their message (one or two lines) and exits with `exit_code`."""

from __future__ import annotations


class SpecliError(Exception):
    """A failure with a message meant for the user; exit code 1 (runtime failure)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n{self.hint}"


class UsageError(SpecliError):
    """The user asked for something invalid (a bad value, an unknown name); exit code 2."""

    exit_code = 2


class PresetError(UsageError):
    """A preset could not be found or parsed; the message names file, line and field."""


class ModelLoadError(SpecliError):
    """A model or tokenizer could not be found, fetched or loaded."""


class ModelNotFoundError(ModelLoadError, UsageError):
    """No model where the user pointed (a path that does not exist, a folder without config.json, an
    unknown embedded:NAME): a usage error, exit code 2, still caught as a ModelLoadError."""
