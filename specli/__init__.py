"""specli: local speculative generation that is exact, fast, and visible."""

__version__ = "0.1.0"

from specli.api import Pair, Result, load
from specli.events import Round, Stats, TokenKind

__all__ = ["Pair", "Result", "Round", "Stats", "TokenKind", "load", "__version__"]
