"""Checkpoints of a `specli train` run: everything a resumed run needs to continue exactly where this one
stopped, bit for bit: the trained weights (float32), the optimizer state, the step, tokens seen, time
spent and history, the data's fingerprint, and every random state (torch's CPU and CUDA generators,
Python's `random`, and each named generator of the run: the data order, noise, packed layouts).

One file, DIR/checkpoint/state.pt, replaced atomically (written beside it, then renamed), read back with
`torch.load(weights_only=True)`. Importing it does not import torch (the CLI checks --out before torch
loads): its functions do.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

FOLDER = "checkpoint"
STATE = "state.pt"
FORMAT = 1


def path_in(out: Path) -> Path:
    return Path(out) / FOLDER / STATE


def exists(out: Path) -> bool:
    return path_in(out).is_file()


def random_states(generators: dict[str, torch.Generator]) -> dict[str, Any]:
    """Every random state the run draws from."""
    import torch

    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "python": random.getstate(),
        "generators": {name: g.get_state() for name, g in generators.items()},
    }


def restore_random_states(states: dict[str, Any], generators: dict[str, torch.Generator]) -> None:
    """Put back what random_states() captured (the named generators must be the same set)."""
    import torch

    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    random.setstate(_as_tuple(states["python"]))
    missing = set(generators) ^ set(states["generators"])
    if missing:
        raise ValueError(f"the checkpoint's generators differ from the run's: {sorted(missing)}")
    for name, g in generators.items():
        g.set_state(states["generators"][name])


def _as_tuple(value: Any) -> Any:
    """random.setstate wants tuples where a round trip may give lists."""
    if isinstance(value, list | tuple):
        return tuple(_as_tuple(v) for v in value)
    return value


def save(out: Path, payload: dict[str, Any]) -> Path:
    """Write payload (+ the format number) to DIR/checkpoint/state.pt atomically; returns its path."""
    import torch

    path = path_in(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save({"format": FORMAT, **payload}, partial)
    os.replace(partial, path)
    return path


def load(out: Path) -> dict[str, Any]:
    """The checkpoint of DIR (tensors on CPU)."""
    import torch

    state = torch.load(path_in(out), map_location="cpu", weights_only=True)
    if state.get("format") != FORMAT:
        raise ValueError(f"checkpoint format {state.get('format')} is not {FORMAT}")
    return state
