"""Small wording helpers shared by every view: counts with the right plural, and why generation stopped."""

from __future__ import annotations

from specli.engine.events import StopReason


def count(n: int, singular: str, plural: str | None = None) -> str:
    """'1 round', '3 rounds', '0 rounds' (plural: the irregular form, default singular + 's')."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


HEAD_NAMES = {"eagle1": "EAGLE-1", "eagle3": "EAGLE-3", "peagle": "P-EAGLE"}


def head_name(info: dict) -> str:
    """The EAGLE head a round's info names: 'EAGLE-1', 'EAGLE-3' or 'P-EAGLE' (parallel)."""
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
