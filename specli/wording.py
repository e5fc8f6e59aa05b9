"""How specli words things, for every part that writes to a person: the views (cli/, render/, serve/) and
the producers that report progress (bench/, training/). Counts with the right plural, durations, the
strategy label, why generation stopped, the drafter's note and the one-line summary of a generation.

Pure functions of plain values and of `Stats`; nothing here prints or imports a view, so producers use
it without depending on cli/, render/ or serve/ (docs/design.md §2: data flows one way).
"""

from __future__ import annotations

from specli.engine.events import Stats, StopReason
from specli.strategies import Strategy


def count(n: int, singular: str, plural: str | None = None) -> str:
    """'1 round', '3 rounds', '0 rounds' (plural: the irregular form, default singular + 's')."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def clock(seconds: float) -> str:
    """'0:07', '12:30', '1:02:03' (whole seconds)."""
    minutes, secs = divmod(int(max(0.0, seconds) + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def strategy_label(strategy: str, k: int | None = None) -> str:
    """The views' header: the strategy, and k when it drafts, e.g. "draft k=4" or "none"."""
    return strategy + (f" k={k}" if k and strategy != Strategy.NONE else "")


HEAD_NAMES = {"eagle1": "EAGLE-1", "eagle3": "EAGLE-3", "peagle": "P-EAGLE", "heads": "blockwise heads"}


def head_name(info: dict) -> str:
    """The head a round's info names: 'EAGLE-1', 'EAGLE-3', 'P-EAGLE' (parallel) or 'blockwise heads'."""
    return HEAD_NAMES.get(str(info.get("head")), "EAGLE")


def drafter_note(info: dict) -> str:
    """What the status line says about the drafter, from a round's info: 'EAGLE-3 on layers 2,4,5',
    'P-EAGLE on layers 2,4,5, parallel', 'parallel: 1 pass per round' (a PARD drafter); '' otherwise."""
    parallel = "1 pass per round" if info.get("parallel") else ""
    if info.get("target_layers"):
        note = f"{head_name(info)} on layers {','.join(str(i) for i in info['target_layers'])}"
        return f"{note}, {parallel}" if parallel else note
    return f"parallel: {parallel}" if parallel else ""


STOP_REASONS: dict[str, str] = {
    StopReason.EOS.value: "the model ended the text (end-of-sequence token)",
    StopReason.STOP_STRING.value: "a stop string was generated",
    StopReason.MAX_NEW_TOKENS.value: "the --max-new-tokens limit was reached",
    StopReason.CONTEXT.value: "the model's context is full",
    "interrupted": "interrupted (Ctrl-C)",
}


def stop_text(reason: StopReason | str | None, tokens: int, interrupted: bool = False) -> str | None:
    """'stopped after 3 tokens: a stop string was generated' (None when there is nothing to say)."""
    if interrupted:
        reason = "interrupted"
    if reason is None:
        return None
    key = reason.value if isinstance(reason, StopReason) else str(reason)
    why = STOP_REASONS.get(key, key.replace("_", " "))
    return f"stopped after {count(tokens, 'token')}: {why}"


def summary_line(
    stats: Stats,
    strategy: str,
    k: int | None = None,
    exit_layer: int | None = None,
    compiled: str | None = None,
) -> str:
    """One line: rounds, acceptance rate, mean acceptance length, tokens/s (and `self`'s exit layer);
    `compiled` ("compiled in 41.0s ...") comes before the tokens/s, which never include it. The generate
    command's summary on stderr and specli serve's console line per request."""
    label = strategy_label(strategy, k)
    if strategy == Strategy.SELF and exit_layer is not None:
        label += f" exit layer {exit_layer}"
    parts = [label, count(stats.rounds, "round")]
    if compiled:
        parts.append(compiled)
    if stats.drafted:
        parts += [
            f"acceptance {stats.acceptance_rate:.1%} ({stats.accepted}/{stats.drafted})",
            f"mean acceptance length {stats.mean_acceptance_length:.2f}",
        ]
    tokens = count(stats.tokens, "token")
    parts.append(f"{tokens} in {stats.elapsed:.2f}s = {stats.tokens_per_second:.1f} tok/s")
    if stats.stop_reason is not None:
        parts.append(f"stop: {stats.stop_reason.value}")
    return " · ".join(parts)
