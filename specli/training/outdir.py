"""The output folder of a `specli train` run (--out): which folders a run may write into, and its
training.json. Torch-free: the CLI checks --out before torch loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specli.errors import UsageError
from specli.training import checkpoint

REPORT = "training.json"
OWN_OUTPUT = (REPORT, checkpoint.FOLDER)  # a folder holding one of these is a `specli train` output


def check_out(out: Path, resume: bool = False, overwrite: bool = False) -> None:
    """An empty or new folder; a non-empty one only with --resume (it must hold a checkpoint) or
    --overwrite (it must be a `specli train` output). UsageError otherwise."""
    if resume and overwrite:
        raise UsageError("--resume and --overwrite contradict each other: pick one.")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out '{out}' is a file, not a folder.")
    busy = out.is_dir() and any(out.iterdir())
    if resume:
        if not checkpoint.exists(out):
            raise UsageError(f"nothing to resume in '{out}': it holds no checkpoint ({checkpoint.FOLDER}/).")
        return
    if not busy:
        return
    if not overwrite:
        raise UsageError(
            f"--out '{out}' is not empty.",
            "Pass --resume to continue its run, --overwrite to replace it, or name an empty folder.",
        )
    if not any((out / name).exists() for name in OWN_OUTPUT):
        raise UsageError(
            f"--out '{out}' is not empty and holds no `specli train` output: --overwrite will not empty it.",
            "Name an empty folder.",
        )


def read_report(out: Path) -> dict[str, Any] | None:
    """DIR/training.json, or None when it is missing or unreadable."""
    try:
        report = json.loads((out / REPORT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def write_report(out: Path, report: dict[str, Any]) -> None:
    (out / REPORT).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
