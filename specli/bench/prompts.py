"""The prompt sets `specli bench` runs and `specli train` measures and trains on: the packaged sets
(`code`, `chat`: specli/bench/sets/*.jsonl), prompt files (Spec-Bench question.jsonl, JSONL records with
a "prompt" or "text" field, or text with one prompt per line), and the choice of categories and limits.
No torch here: a bad file, set or category fails before any model loads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specli.errors import UsageError

SETS = ("code", "chat")


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt of a set: its id and category (as the file names them) and its text."""

    id: str
    category: str
    text: str


def record_prompt(row: Any) -> str:
    """The prompt of one JSONL prompt record: Spec-Bench's {"turns": [first, ...]} (the first turn), or
    {"prompt": ...} / {"text": ...}. ValueError saying what is wrong: not an object, none of the fields,
    an empty 'turns', a prompt that is not a string or is empty."""
    if not isinstance(row, dict):
        raise ValueError(f"a prompt record is a JSON object, not {type(row).__name__}")
    if "turns" in row:
        turns, field = row["turns"], "the first of 'turns'"
        if not isinstance(turns, list) or not turns:
            raise ValueError("'turns' is empty: it needs the prompt as its first turn")
        text = turns[0]
    elif "prompt" in row or "text" in row:
        field = "'prompt'" if "prompt" in row else "'text'"
        text = row.get("prompt", row.get("text"))
    else:
        raise ValueError("a prompt record needs 'turns', 'prompt' or 'text'")
    if not isinstance(text, str):
        raise ValueError(f"{field} must be a string, not {type(text).__name__}")
    if not text:
        raise ValueError(f"the prompt ({field}) is empty")
    return text


def set_path(name: str) -> Path:
    """The packaged prompt set NAME (code or chat)."""
    if name not in SETS:
        raise UsageError(
            f"unknown prompt set '{name}'.", f"Use one of: {', '.join(SETS)}, or --prompts FILE."
        )
    return Path(__file__).resolve().parent / "sets" / f"{name}.jsonl"


def read_prompts(path: Path) -> list[BenchPrompt]:
    """Spec-Bench question.jsonl (question_id, category, turns: first turn used), JSONL with a "prompt"
    or "text" field (and optional "id", "category"), or a text file with one prompt per line. Ids are
    unique in the result (reports key runs by them): a repeated id becomes "ID@LINE"."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UsageError(f"cannot read prompts from '{path}': {e.strerror or e}.") from None
    prompts: list[BenchPrompt] = []
    seen: set[str] = set()
    jsonl = str(path).endswith((".jsonl", ".json"))
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not jsonl:
            prompts.append(BenchPrompt(str(number), "default", line))
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise UsageError(f"{path}:{number}: not JSON ({e}).") from None
        try:
            text = record_prompt(row)
        except ValueError as e:
            raise UsageError(f"{path}:{number}: {e}.", 'e.g. {"prompt": "def f(x):"}') from None
        ident = str(row.get("question_id", row.get("id", number)))
        if ident in seen:  # e.g. two sets' files joined: their runs must not be compared with each other
            ident = f"{ident}@{number}"
        seen.add(ident)
        prompts.append(BenchPrompt(ident, str(row.get("category", "default")), text))
    if not prompts:
        raise UsageError(f"'{path}' holds no prompts.")
    return prompts


def check_packaged_categories(categories: Sequence[str]) -> None:
    """UsageError naming each packaged set's categories when a category is in none of them (before a
    model loads: which set a bench runs is chosen by the model, chat or code)."""
    by_set = {name: list(dict.fromkeys(p.category for p in read_prompts(set_path(name)))) for name in SETS}
    known = {c for names in by_set.values() for c in names}
    for c in categories:
        if c not in known:
            listed = "; ".join(f"{name}: {', '.join(names)}" for name, names in by_set.items())
            raise UsageError(f"no prompts in category '{c}'.", f"Categories of the packaged sets: {listed}.")


def select_prompts(
    prompts: list[BenchPrompt], categories: Sequence[str] = (), limit: int | None = None
) -> list[BenchPrompt]:
    """Keep the named categories (all when none) and at most `limit` prompts of each."""
    known = list(dict.fromkeys(p.category for p in prompts))
    for c in categories:
        if c not in known:
            raise UsageError(f"no prompts in category '{c}'.", f"Categories here: {', '.join(known)}.")
    kept: list[BenchPrompt] = []
    counts: dict[str, int] = {}
    for p in prompts:
        if categories and p.category not in categories:
            continue
        if limit is not None and counts.get(p.category, 0) >= limit:
            continue
        counts[p.category] = counts.get(p.category, 0) + 1
        kept.append(p)
    return kept
