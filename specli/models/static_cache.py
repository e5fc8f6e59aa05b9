"""Static KV caches for `--compile` (docs/design.md §12): one preallocated transformers `StaticCache` per
model, reused across generations, rewound by position instead of cropped.

transformers 5.24's `StaticLayer` keeps its length in a tensor (`cumulative_length`): `update` writes the
new keys at that position and advances it, `crop(-n)` moves it back without touching the keys, and the
causal mask (`masking_utils._preprocess_mask_arguments`) takes its query offset from it with the key
length fixed at the capacity, so slots past the position are never attended. specli tracks the length it
committed itself (`StaticKV.length`) and passes explicit `position_ids` built from it; `check` compares the
two (the tests call it after every round).

`torch.compile` guards on the cache tensors' addresses (they are marked static), so a model keeps ONE
StaticCache and every generation starts by moving it back to position 0; a new, larger cache is built
only when a generation needs more room than it has (and then the compiled graphs are built again).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

STATIC_DEFAULT_LENGTH = 2048  # a Pair's first capacity (positions), when the model's context is longer
STATIC_MIN_LENGTH = 64  # capacities are powers of two from here
COMPILE_RECOMPILE_LIMIT = 64  # dynamo graphs per code object: one per (model, shape); torch's default is 8


def capacity_for(length: int) -> int:
    """The capacity a cache that must hold `length` positions grows to: the next power of two (at least
    STATIC_MIN_LENGTH), so growing generations reallocate (and recompile) only a few times."""
    return max(STATIC_MIN_LENGTH, 1 << max(0, length - 1).bit_length())


def static_cache_problem(model: Any) -> str | None:
    """Why specli cannot run `model` over a rewindable static cache, or None when it can.

    Only plain full-attention layers qualify: a static sliding-window layer rolls its window in place
    once full, so positions it dropped cannot come back after a rejected draft.
    """
    try:
        from transformers import StaticCache
        from transformers.cache_utils import StaticLayer
    except ImportError:  # pragma: no cover - every supported transformers has them
        return "this transformers has no StaticCache"
    import inspect

    import transformers

    if "position_ids" not in inspect.signature(model.forward).parameters:
        return "its forward takes no position_ids"
    if not isinstance(getattr(StaticLayer(max_cache_len=1), "cumulative_length", None), torch.Tensor):
        return (
            f"transformers {transformers.__version__}'s StaticCache does not track its own length "
            "(specli's static caches were built against 5.24)"
        )
    try:
        cache = StaticCache(config=model.config, max_cache_len=STATIC_MIN_LENGTH)
    except Exception as e:  # noqa: BLE001 - any failure means: no static cache for this model
        return f"transformers cannot give it a StaticCache ({type(e).__name__}: {e})"
    for layer in cache.layers:
        if getattr(layer, "is_sliding", False):
            window = getattr(model.config, "sliding_window", None)
            size = f" (window {window})" if window else ""
            return f"it has sliding-window attention layers{size}, which a static cache cannot rewind"
        if type(layer) is not StaticLayer:
            return f"its cache has {type(layer).__name__} layers, not plain attention layers"
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and not getattr(quantizer, "is_compileable", False):
        return f"its quantization ({type(quantizer).__name__}) cannot be compiled"
    devices = set(getattr(model, "hf_device_map", {}).values())
    if "disk" in devices or ("cpu" in devices and len(devices) > 1):
        return "part of it is offloaded to CPU or disk"
    return None


class StaticKV:
    """One generation's handle on a model's static cache: the transformers StaticCache and the number of
    positions specli holds in it (`length`). Positions past `length` hold stale keys that the causal mask
    hides and the next forward overwrites.

    The same small interface as the dynamic cache (`cached_lm.DynamicKV`), so `CachedLM` never asks which
    kind it holds: model_cache (what the forward receives), begin / position_ids / advance around a
    forward, replayable (a compiled call may run), mask_columns, compact, rewind, settle, grad_mode."""

    def __init__(self, store: StaticStore, cache: Any, epoch: int) -> None:
        self._store = store
        self.cache = cache  # transformers.StaticCache, what the model's forward receives
        self._epoch = epoch
        self.length = 0

    @property
    def capacity(self) -> int:
        return self._store.capacity

    @property
    def current(self) -> bool:
        """False once the model's cache was handed to a newer generation (this handle is then dead)."""
        return self._store.epoch == self._epoch and self._store.cache is self.cache

    def begin(self, n: int) -> None:
        """Before a forward over n new positions: this handle is still the cache's owner, and they fit."""
        if not self.current:
            raise RuntimeError(
                "this static cache was handed to a newer generation: with --compile a pair runs one "
                "generation at a time"
            )
        if self.length + n > self.capacity:
            raise RuntimeError(
                f"static cache overflow: {self.length} + {n} positions > capacity {self.capacity} "
                "(reserve more before generating)"
            )

    @property
    def model_cache(self) -> Any:
        """What the model's forward receives: the transformers StaticCache."""
        return self.cache

    @property
    def replayable(self) -> bool:
        """Whether a compiled call may run the next forward: not the first on a new cache (its tensors
        must exist), which stays eager."""
        return self._store.initialized and self.length > 0

    def mask_columns(self, seen: int) -> int:
        """Key columns of a 4D mask for a masked forward seeing `seen` keys: the whole capacity."""
        return self.capacity

    def position_ids(self, n: int, device: torch.device) -> torch.Tensor | None:
        """[1, n] positions of the next n tokens."""
        return torch.arange(self.length, self.length + n, device=device)[None]

    def compact(self, n: int, kept: list[int]) -> None:
        """Of the newest n positions, move `kept` (ascending offsets) to the front of that block."""
        start = self.length - n
        for layer in self.cache.layers:
            compact_positions(layer.keys, layer.values, start, kept)

    def settle(self) -> None:
        """Nothing to trim: a static cache has no sliding layers."""

    @contextmanager
    def grad_mode(self) -> Iterator[None]:
        """no_grad with inference mode off, whatever the caller's: the cache's tensors outlive the call
        and compiled graphs update them in place, which inference tensors only allow inside inference
        mode."""
        with torch.inference_mode(False), torch.no_grad():
            yield

    def advance(self, n: int) -> None:
        self.length += n
        self._store.initialized = True

    def rewind(self, n: int) -> None:
        """Drop the newest n >= 0 positions: only the position moves (StaticLayer.crop(-n))."""
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot rewind {n} of {self.length} positions")
        if n:
            self.cache.crop(-n)
            self.length -= n

    def cache_lengths(self) -> list[int]:
        """Each layer's own position (StaticLayer.cumulative_length); equal to `length` when in step."""
        return [int(layer.get_seq_length()) for layer in self.cache.layers]

    def check(self) -> None:
        """AssertionError unless every layer's own position equals the tracked length."""
        lengths = self.cache_lengths()
        if any(n != self.length for n in lengths):
            raise AssertionError(f"static cache out of step: tracked {self.length}, layers {lengths}")


class StaticStore:
    """The one StaticCache a model reuses across generations; grows on demand, never shrinks."""

    def __init__(self, config: Any, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"static capacity must be >= 1 (got {capacity})")
        self.config = config
        self.capacity = capacity
        self.cache: Any = None  # built on the first generation
        self.epoch = 0
        self.initialized = False  # a forward has run on `cache` (its tensors exist: compiled calls may go)

    def reserve(self, length: int) -> None:
        """Make room for `length` positions: a new cache of `capacity_for(length)` when it lacks it."""
        if length > self.capacity:
            self.capacity = capacity_for(length)
            self.cache = None

    def fresh(self) -> StaticKV:
        """The cache back at position 0 for a new generation; earlier handles go dead."""
        from transformers import StaticCache

        if self.cache is None:
            self.cache = StaticCache(config=self.config, max_cache_len=self.capacity)
            self.initialized = False
        else:
            for layer in self.cache.layers:
                stale = int(layer.get_seq_length())
                if stale:
                    layer.crop(-stale)
        self.epoch += 1
        return StaticKV(self, self.cache, self.epoch)


def compile_call(model: Any) -> Any:
    """`model.__call__` under torch.compile.

    CUDA: CUDA graphs ("reduce-overhead") over static shapes, one graph per input length. Elsewhere:
    inductor's default mode over dynamic shapes: one graph for a single token and one for every longer
    input (measured on 2 CPU cores, the embedded target: each graph compiles in 20-45 s, and the dynamic
    graph runs a 5-token verify as fast as a graph built for 5 tokens, so k + 1 lengths cost two
    compiles instead of k + 1). Pair.warm_up builds every graph a generation can use before it starts.
    """
    from torch._dynamo import config as dynamo_config

    for name in ("recompile_limit", "cache_size_limit"):  # torch 2.13 / older
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), COMPILE_RECOMPILE_LIMIT))
            break
    cuda = torch.device(getattr(model, "device", torch.device("cpu"))).type == "cuda"
    mode = "reduce-overhead" if cuda else "default"
    return torch.compile(model.__call__, mode=mode, dynamic=not cuda, fullgraph=False)


def compiled_graphs() -> int:
    """Graphs torch.compile has built in this process so far (dynamo's count): a timed run during which
    it grows compiled something, and its time is not the steady state's."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - every supported torch has it
        return 0
    return int(counters["stats"]["unique_graphs"])


def compact_positions(keys: torch.Tensor, values: torch.Tensor, start: int, kept: list[int]) -> None:
    """Copy positions start + kept (along dim -2 of keys and values [.., T, d]) to start, start + 1, .."""
    index = torch.tensor(kept, device=keys.device) + start
    end = start + len(kept)
    keys[..., start:end, :] = keys.index_select(-2, index)
    values[..., start:end, :] = values.index_select(-2, index)
