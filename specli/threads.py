"""How many CPU threads torch uses (docs/design.md §5, Threads).

On a small CPU machine another busy process makes torch's OpenMP threads spin-wait for each other: with
torch's default (one thread per core) the embedded pair fell from ~200 to ~15 tok/s. Two things help and
specli does both by default ("auto"):

- `use_passive_wait()`: OpenMP's passive wait policy (idle threads sleep instead of spinning). OpenMP
  reads it once, when torch loads, so the command line sets it before importing torch; it never
  overrides an OMP_WAIT_POLICY the user set.
- `auto_threads()`: the cores not already busy, by the 1-minute load average, at least one and at most
  torch's own default. This also works when torch is already imported (the Python API).

No torch at import: the command line calls `use_passive_wait()` before anything imports torch.
"""

from __future__ import annotations

import os
from typing import Any

from specli.errors import UsageError

AUTO = "auto"
_torch_default: int | None = None  # torch's own thread count, before specli changed it


def use_passive_wait() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless set; effective only before torch (OpenMP) initialises."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def parse_threads(value: Any) -> int | str | None:
    """'auto', None (leave torch alone) or a whole number >= 1 (also as text, from the command line)."""
    if value is None or value == AUTO:
        return value
    count = None
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, str) and value.strip().isdigit():
        count = int(value)
    if count is None or count < 1:
        raise UsageError(
            f"threads must be a whole number >= 1 or 'auto' (got {value!r}).",
            "auto uses the cores other processes leave free.",
        )
    return count


def auto_threads(default: int, cpus: int | None = None, load: float | None = None) -> int:
    """The cores other work leaves free: cpus minus the 1-minute load average (rounded), clamped to
    [1, default] (default: torch's own count, one per physical core)."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not available on this system
            load = 0.0
    return max(1, min(default, cpus - round(load)))


def apply_threads(threads: Any = AUTO) -> int:
    """Set torch's intra-op threads: a number, 'auto' (`auto_threads`) or None (leave as they are).
    Returns the count torch now uses."""
    import torch

    global _torch_default
    if _torch_default is None:
        _torch_default = torch.get_num_threads()
    threads = parse_threads(threads)
    if threads == AUTO:
        threads = auto_threads(_torch_default)
    if threads is not None and threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return torch.get_num_threads()
