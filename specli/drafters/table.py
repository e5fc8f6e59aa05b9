"""The strategies: `Strategy` names the shipped ones.

No torch here: the CLI and the preset schema check strategy names before anything heavy is imported.
"""

from __future__ import annotations

from enum import Enum


class Strategy(str, Enum):
    """The shipped strategies. A str enum: members equal, hash and print as their plain names ("draft"),
    so YAML, JSON and command-line values stay plain strings."""

    DRAFT = "draft"
    NONE = "none"
    LOOKUP = "lookup"
    SELF = "self"
    EAGLE = "eagle"

    def __str__(self) -> str:  # and so format(): f"{Strategy.DRAFT}" is "draft", not "Strategy.DRAFT"
        return self.value
