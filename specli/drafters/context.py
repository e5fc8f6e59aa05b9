"""What a strategy's file is given to build its drafter: `DraftContext`, the loaded models and the
resolved settings of one generation, and `build_drafter`, the one dispatch from a strategy's table
entry to its file's `build(context, length)`.

Strategies read the context, never the pair that composes them (`specli.pair` sits above every drafter
and builds the context), so a drafter can be built and tested from models alone.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specli.engine.drafter import Drafter
    from specli.settings import Settings
    from specli.strategies import Entry


def _no_lean_step(model: Any) -> tuple[Any, str | None]:
    return None, "no lean step was offered"


@dataclass(frozen=True)
class DraftContext:
    """One generation's drafting inputs.

    target / draft: the models the loop drives (their caches: vocab_size, sliding_window, rewind);
    target_model / draft_model: the modules under them (layers, configs); head: an EAGLE head or None;
    heads: blockwise heads or None;
    *_name: how messages name each; draft_max_positions: the drafter model's context length (None: no
    drafter model or no limit); lean_step(module) -> (specli's own forward for it or None, why not),
    built once per module by whoever composes the models."""

    settings: Settings
    target: Any
    target_model: Any
    target_name: str
    draft: Any = None
    draft_model: Any = None
    draft_name: str | None = None
    draft_max_positions: int | None = None
    head: Any = None
    head_name: str | None = None
    heads: Any = None
    heads_name: str | None = None
    lean_step: Callable[[Any], tuple[Any, str | None]] = _no_lean_step


def build_drafter(entry: Entry, context: DraftContext, length: int) -> Drafter | None:
    """The drafter `entry`'s file builds for a generation that can reach `length` tokens (None: plain
    decoding). Its file is imported here, on first use, so the table stays free of torch."""
    if entry.module is None:
        return None
    return importlib.import_module(entry.module).build(context, length)
