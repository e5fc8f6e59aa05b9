"""Self-distillation (--regenerate): the target answers every prompt of the data, greedy, through specli's
own engine (plain decoding), and the drafter trains on prompt + answer: the text the target itself
writes, which is what the drafter will be asked to guess.

Answers are cached on disk, one JSON line per answered prompt, in a file named by a hash of everything
that decides them (the target's folder, config and weight files, dtype, quantization, device type, the
prompts' ids, the answer length). A rerun reads them instead of generating; an interrupted run keeps the
answers it wrote and generates only the rest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specli.errors import UsageError
from specli.strategies import Strategy

CACHE_VERSION = 1


def model_identity(folder: Path) -> dict[str, Any]:
    """What names a model's weights without reading them: its folder, the hash of its config.json, and
    the name, size and modification time of each weights file."""
    folder = Path(folder).resolve()
    config = folder / "config.json"
    digest = hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None
    weights = sorted(
        (p.name, p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.iterdir()
        if p.is_file() and p.suffix in (".safetensors", ".bin")
    )
    return {"folder": str(folder), "config": digest, "weights": weights}


@dataclass(frozen=True)
class AnswerKey:
    """Everything that decides the target's greedy answers."""

    target: dict[str, Any]
    dtype: str
    quant: str
    device: str
    max_new_tokens: int

    def file_name(self, prompts: Sequence[Sequence[int]]) -> str:
        data = {
            "version": CACHE_VERSION,
            **self.__dict__,
            "prompts": hashlib.sha256(json.dumps([list(p) for p in prompts]).encode()).hexdigest(),
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32] + ".jsonl"


def read_answers(path: Path) -> dict[int, list[int]]:
    """The answers a cache file holds, by prompt index (a line cut short by a kill is ignored)."""
    answers: dict[int, list[int]] = {}
    if not path.is_file():
        return answers
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            answers[int(row["i"])] = [int(t) for t in row["output_ids"]]
        except (ValueError, KeyError, TypeError):
            continue
    return answers


def answer_all(
    prompts: Sequence[Sequence[int]],
    respond: Callable[[list[int]], list[int]],
    cache: Path,
    advance: Callable[[], None] = lambda: None,
) -> tuple[list[list[int]], int]:
    """Each prompt's answer: from `cache` when it holds it, else respond(prompt) (appended to the cache at
    once). Returns (answers, how many were generated now)."""
    answers = read_answers(cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    generated = 0
    with cache.open("a", encoding="utf-8") as f:
        for i, prompt in enumerate(prompts):
            if i not in answers:
                answers[i] = respond(list(prompt))
                f.write(json.dumps({"i": i, "output_ids": answers[i]}) + "\n")
                f.flush()
                generated += 1
            advance()
    return [answers[i] for i in range(len(prompts))], generated


def greedy_responder(pair: Any, max_new_tokens: int) -> Callable[[list[int]], list[int]]:
    """The target's greedy continuation of a prompt, by specli's engine with no drafter."""

    def respond(ids: list[int]) -> list[int]:
        result = pair.generate(
            prompt_ids=ids, strategy=Strategy.NONE, temperature=0.0, max_new_tokens=max_new_tokens
        )
        return list(result.token_ids)

    return respond


def fitting_prompts(prompts: Sequence[Sequence[int]], context: int | None) -> list[int]:
    """Indices of the prompts that leave room to answer within the target's context."""
    keep = [i for i, p in enumerate(prompts) if p and (context is None or len(p) < context - 1)]
    if not keep:
        raise UsageError("no prompt of the data fits the target's context, so none can be answered.")
    return keep
