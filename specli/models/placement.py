"""Placing a pair on several GPUs (pure planning; `plan.plan_pair` makes the plan, `api.load` applies it).

The target is split by accelerate's `device_map="auto"` under a `max_memory` map for its weights. The
map leaves room on every GPU for the target's KV cache (its layers' share of it) and, on the GPU that
gets the target's LM head, for the drafter and its cache. The drafter goes there, so its q and the
target's p meet on one device and the engine moves only token ids between GPUs.

To know where the LM head lands, the plan replays what transformers does with "auto": every GPU but the
last is capped at an even share of the weights plus a buffer of 1.25 modules (bitsandbytes then takes
10% off every cap), modules are placed whole and in order, and GPU 0 keeps room for the largest module
still to come. The buffer is 1.25 decoder layers in transformers 5.17 and 1.25 of the largest module
(often the embedding) in 5.24; a plan must work under both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specli.models.memory import WORKSPACE, Estimate, human

QUANT_CAP = 0.9  # transformers' bitsandbytes quantizers scale every max_memory entry by this


@dataclass(frozen=True)
class Placement:
    """Where a pair goes.

    target_gpus: the GPUs the target's layers spread over, in order.
    max_memory: accelerate's max_memory for the target's weights, {gpu index: bytes} (empty: let
        accelerate use every GPU).
    draft_gpu: the GPU that gets the target's LM head and the drafter, or None without a drafter.
    """

    target_gpus: tuple[int, ...]
    max_memory: dict[int, int]
    draft_gpu: int | None
    draft_bytes: int = 0  # what the drafter was planned to take on draft_gpu

    @property
    def split(self) -> bool:
        return len(self.target_gpus) > 1

    def describe(self) -> str:
        """One line for the user: which GPUs hold what."""
        line = "target on " + ", ".join(f"cuda:{i}" for i in self.target_gpus)
        if self.draft_gpu is not None:
            line += f"; drafter on cuda:{self.draft_gpu}"
        return line


def fill(modules: Sequence[int], caps: Sequence[float]) -> list[int] | None:
    """The GPU each module lands on when placed whole and in order under per-GPU caps, GPU 0 keeping
    room for the largest module still to come (transformers' infer_auto_device_map); None when they do
    not all fit."""
    gpu, used, where = 0, 0.0, []
    for i, size in enumerate(modules):
        reserve = max(modules[i + 1 :], default=0) if gpu == 0 else 0
        while used + size > caps[gpu] - reserve:
            gpu, used, reserve = gpu + 1, 0.0, 0
            if gpu == len(caps):
                return None
        where.append(gpu)
        used += size
    return where


def head_gpu(target: Estimate, budgets: Sequence[float], quantized: bool, buffer: float) -> int | None:
    """Where transformers' device_map="auto" puts the LM head under max_memory `budgets`, with `buffer`
    bytes over the even share on every GPU but the last (None: it would spill off the GPUs). A tied head
    is placed with the embedding."""
    modules = target.modules or (target.weights_bytes,)
    scale = QUANT_CAP if quantized else 1.0
    per_gpu = target.weights_bytes / len(budgets) + buffer
    caps = [min(per_gpu, b) * scale for b in budgets[:-1]] + [budgets[-1] * scale]
    where = fill(modules, caps)
    if where is None:
        return None
    return where[0] if target.tied else where[-1]


def _buffers(target: Estimate) -> set[float]:
    """The balancing buffers of the transformers versions we know (see the module docstring)."""
    modules = target.modules or (target.weights_bytes,)
    layers = modules[1:-1] or modules
    return {1.25 * max(layers), 1.25 * max(modules)}


def plan_placement(
    free: Sequence[int], target: Estimate, draft: Estimate | None = None, *, quantized: bool = False
) -> Placement | None:
    """The fewest leading GPUs (by index) that hold the target, and the drafter beside its LM head.

    free: free bytes of each GPU, indexed by GPU number. Estimates as from `memory.estimate` (their
    totals carry the 10% workspace); quantized: the target loads through bitsandbytes. Returns None
    when no prefix of the GPUs can hold the pair.
    """
    draft_total = draft.total_bytes if draft is not None else 0
    per_weight = WORKSPACE * (target.weights_bytes + target.kv_bytes) / max(target.weights_bytes, 1)
    scale = QUANT_CAP if quantized else 1.0
    for count in range(1, len(free) + 1):
        for host in range(count - 1, -1, -1) if draft is not None else [None]:
            room = [float(free[i]) - (draft_total if i == host else 0.0) for i in range(count)]
            if min(room) < 0:
                continue
            budgets = [r / per_weight for r in room]  # weights each GPU may take, its KV room kept
            if count == 1:  # one GPU: loaded whole onto it, no device map
                if budgets[0] < target.weights_bytes:
                    continue
            else:
                heads = {head_gpu(target, budgets, quantized, b) for b in _buffers(target)}
                if None in heads or (host is not None and heads != {host}):
                    continue
            return Placement(
                target_gpus=tuple(range(count)),
                max_memory={i: int(b / scale) for i, b in enumerate(budgets)},
                draft_gpu=host,
                draft_bytes=draft_total,
            )
    return None


def describe_gpus(free: Sequence[int]) -> str:
    """'cuda:0 10.0 GB, cuda:1 12.0 GB free' for messages."""
    return ", ".join(f"cuda:{i} {human(f)}" for i, f in enumerate(free)) + " free"
