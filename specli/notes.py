"""One-line notes about how a generation will run when that is not what the command line suggests:
plain decoding because no drafter was named, a drafter that sees only the most recent part of a long
context. Pure: computed from the loaded pair, the settings and the prompt's length before generating;
the CLI prints each once on stderr ("note: ...") and lists them in the JSON output (stats.notes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specli.strategies import Model, entry

if TYPE_CHECKING:
    from specli.settings import Settings


def drafter_window(max_positions: int) -> int:
    """The most recent tokens the draft model drafts from once the context outgrows it (the drafter's
    own rule, so the note cannot drift from it). Imports torch only when called."""
    from specli.drafters.draft_model import recent_window

    return recent_window(max_positions)


def generation_notes(
    pair: Any, settings: Settings, prompt_length: int, strategy_given: str | None = None
) -> list[str]:
    """The notes for one generation. `pair` is the loaded `Pair` (strategy, draft_max_positions);
    `strategy_given` the strategy the user named (None: they named none, so 'none' was a fallback)."""
    notes = []
    own = entry(settings.strategy)
    if not own.drafts and strategy_given is None:
        notes.append("no drafter given: plain decoding (pass --draft MODEL or --strategy lookup)")
    limit = getattr(pair, "draft_max_positions", None)
    if own.model == Model.DRAFT and limit is not None and prompt_length + settings.max_new_tokens > limit:
        notes.append(
            f"the drafter's context is {limit} tokens; it drafts from the most recent {drafter_window(limit)}"
        )
    return notes
