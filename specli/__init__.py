"""specli: local speculative generation that is exact, fast, and visible.

The names below load on first use, so `import specli` (and `specli --version`) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from specli.version import __version__

if TYPE_CHECKING:
    from specli.api import load
    from specli.engine.events import Round, Stats, TokenKind
    from specli.pair import GenerationStats, Pair, Result

_LAZY = {
    "GenerationStats": "specli.pair",
    "Pair": "specli.pair",
    "Result": "specli.pair",
    "load": "specli.api",
    "Round": "specli.engine.events",
    "Stats": "specli.engine.events",
    "TokenKind": "specli.engine.events",
}

__all__ = ["GenerationStats", "Pair", "Result", "Round", "Stats", "TokenKind", "load", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # once imported, a plain attribute
        return value
    raise AttributeError(f"module 'specli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
