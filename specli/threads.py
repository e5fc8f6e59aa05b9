"""How many CPU threads torch uses (docs/design.md §5, Threads).

On a small CPU machine another busy process makes torch's OpenMP threads spin-wait for each other: with
torch's default (one thread per core) the embedded pair fell from ~200 to ~15 tok/s. One thread per core
that other work leaves free avoids it, and costs nothing on a quiet machine ("auto", the default).
OpenMP's passive wait policy would avoid it too, but on a quiet 2-core machine it halves the speed of
small models (212 -> 111 tok/s for plain decoding of the tiny pair, 2 threads), so specli leaves
OMP_WAIT_POLICY to the user.

What counts as busy: `BusyProbe` measures the CPU time *other* processes used while specli loaded its
models (/proc/stat minus this process's own time). A load average would also count the specli run that
just ended, so back-to-back runs on a quiet machine would lose a core. Without /proc/stat (or a window
too short to tell), the 1-minute load average decides.

No torch at import: `specli --help` and `--version` must stay fast.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from typing import Any

from specli.errors import UsageError

AUTO = "auto"
MIN_WINDOW_S = 0.05  # a shorter probe cannot tell a busy core from scheduling noise


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


def cpu_count() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _busy_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat's first line; None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


@dataclass
class BusyProbe:
    """Started before loading; `other_cores()` afterwards: how many cores other processes kept busy."""

    start_wall: float = field(default_factory=time.monotonic)
    start_own: float = field(default_factory=_own_cpu_seconds)
    start_jiffies: tuple[int, int] | None = field(default_factory=_busy_jiffies)

    def other_cores(self) -> float | None:
        """Cores' worth of CPU used by other processes since the start; None when it cannot tell."""
        now = _busy_jiffies()
        wall = time.monotonic() - self.start_wall
        if now is None or self.start_jiffies is None or wall < MIN_WINDOW_S:
            return None
        busy, total = now[0] - self.start_jiffies[0], now[1] - self.start_jiffies[1]
        if total <= 0:
            return None
        all_cores = cpu_count() * busy / total
        own = (_own_cpu_seconds() - self.start_own) / wall
        return max(0.0, all_cores - own)


def auto_threads(default: int, cpus: int | None = None, busy: float | None = None) -> int:
    """The cores other work leaves free: cpus minus `busy` (cores other processes use; by default the
    1-minute load average), rounded, clamped to [1, default] (default: torch's own count)."""
    cpus = cpu_count() if cpus is None else cpus
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except OSError:  # not available on this system
            busy = 0.0
    return max(1, min(default, cpus - round(busy)))


@functools.cache
def _torch_default() -> int:
    """torch's own thread count, read once, before specli first changes it."""
    import torch

    return torch.get_num_threads()


def apply_threads(threads: Any = AUTO, probe: BusyProbe | None = None) -> int:
    """Set torch's intra-op threads: a number, 'auto' (`auto_threads`, from the probe when it can tell)
    or None (leave as they are). Returns the count torch now uses."""
    import torch

    default = _torch_default()
    threads = parse_threads(threads)
    if threads == AUTO:
        threads = auto_threads(default, busy=probe.other_cores() if probe is not None else None)
    if threads is not None and threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return torch.get_num_threads()
