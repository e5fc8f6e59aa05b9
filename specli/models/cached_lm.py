"""A causal LM driven one forward at a time over a KV cache it can rewind (docs/design.md §3, §5)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel

from specli.models.skinny_linear import skinny_linears
from specli.models.static_cache import StaticKV, StaticStore, compact_positions, compile_call

COMPILED_TOKENS = 16  # default longest compiled forward; a Pair sets k + 1 per generation
SLIDING_ROLLBACK_VERSION = "5.18"  # first transformers whose sliding layers survive forwards in a row


def check_sliding_rollback(lm: CachedLM, what: str, length: int) -> None:
    """SpecliError when `lm` would draft through sliding-window layers past their window (a sequence of
    up to `length` tokens) on a transformers too old for it.

    Drafting runs several forwards before the rollback; transformers < 5.18 returns too many keys from
    a recording sliding layer in the second one, which breaks once the context passes the window.
    """
    import transformers
    from packaging.version import Version

    from specli.errors import SpecliError

    if Version(transformers.__version__) >= Version(SLIDING_ROLLBACK_VERSION):
        return
    window = lm.sliding_window
    if window is None or length < window:
        return
    raise SpecliError(
        f"{what} has sliding-window attention layers (window {window}) and this generation can reach "
        f"{length} tokens; drafting past the window needs transformers {SLIDING_ROLLBACK_VERSION} or later "
        f"(this is {transformers.__version__}).",
        f"pip install -U 'transformers>={SLIDING_ROLLBACK_VERSION}', or use --strategy lookup or none.",
    )


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); a no-op elsewhere. Clocks read after this are true."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _execution_device(module: torch.nn.Module) -> torch.device:
    """The device a module computes on: accelerate's hook says so when it placed (or offloaded) it."""
    hook = getattr(module, "_hf_hook", None)
    device = getattr(hook, "execution_device", None)
    if device is not None:
        return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    return module.weight.device


AnyCache = DynamicCache | StaticKV


class CachedLM:
    """Wraps a transformers causal LM: `forward` appends tokens to a cache, `rewind` drops the newest.

    static_length=None: a DynamicCache per generation, cropped to rewind. static_length=N: one reusable
    transformers StaticCache of N positions (grown by `reserve`), rewound by position
    (specli/models/static_cache.py, docs/design.md §12). compile=True (needs static_length) runs the
    forwards of at most `compiled_tokens` tokens on a warm cache through torch.compile (CUDA graphs on
    CUDA); prefills and longer forwards run eagerly. Each distinct input length compiles once, on its
    first call.
    """

    engine = "torch"  # what evaluates the model (Pair.engine; the llama.cpp engine's LlamaLM says so too)

    def __init__(
        self, model: PreTrainedModel, static_length: int | None = None, compile: bool = False
    ) -> None:
        self.model = model
        params = inspect.signature(model.forward).parameters
        # transformers 5.24 names it `cache`; 5.17 only knows `past_key_values` (docs/design.md §5).
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._has_logits_to_keep = "logits_to_keep" in params
        if compile and static_length is None:
            raise ValueError("compile=True needs a static cache (static_length)")
        self._static = StaticStore(model.config, static_length) if static_length is not None else None
        self._compiled = compile_call(model) if compile else None
        self._skinny = skinny_linears(model, compile)  # forwards of a few tokens on a CPU, float32
        self.compiled_tokens = COMPILED_TOKENS  # the longest forward the compiled path takes
        self._warm: set[tuple[int, bool, bool, int]] = set()  # (n, last_only, features, capacity) built

    @property
    def static(self) -> bool:
        """Whether generations run over a static cache."""
        return self._static is not None

    @property
    def compiled(self) -> bool:
        return self._compiled is not None

    @property
    def static_capacity(self) -> int | None:
        """Positions the static cache holds (None: dynamic caches)."""
        return self._static.capacity if self._static is not None else None

    def reserve(self, length: int) -> None:
        """Before a generation whose cache can reach `length` positions: a static cache grows to fit (a
        new allocation, so compiled graphs are built again); dynamic caches need nothing."""
        if self._static is not None:
            self._static.reserve(length)

    @property
    def device(self) -> torch.device:
        """Where input ids go: the embeddings' device."""
        return _execution_device(self.model.get_input_embeddings())

    @property
    def output_device(self) -> torch.device:
        """Where logits come out: the LM head's device (the last GPU when accelerate split the model)."""
        return _execution_device(self.model.get_output_embeddings())

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def warm_up(self, lengths: range, *, last_only: bool = False, features: bool = False) -> int:
        """Run every compiled forward of `lengths` tokens (the variant the engine will call: last_only, or
        with the hidden states, `forward_features`) once over the static cache, so that no graph is built
        during a generation; CUDA graphs are recorded too (three calls each). Lengths already warm on this
        cache are skipped. Returns how many forwards ran (0: nothing was new). The cache is left for the
        next `new_cache()` to reset. A no-op without compile."""
        if self._compiled is None or self._static is None:
            return 0
        capacity = self._static.capacity
        todo = [
            n
            for n in lengths
            if 1 <= n <= self.compiled_tokens and (n, last_only, features, capacity) not in self._warm
        ]
        if not todo:
            return 0
        cache = self.new_cache()
        calls = 3 if self.device.type == "cuda" else 1  # cudagraph trees: warm-up, record, replay
        with cache.grad_mode():
            self._run(torch.zeros(1, dtype=torch.long), cache, last_only=True)  # eager: the cache exists
            extra = {"output_hidden_states": True} if features else {}
            for n in todo:
                for _ in range(calls):
                    self._run(torch.zeros(n, dtype=torch.long), cache, last_only, **extra)
                    self.rewind(cache, n)
                self._warm.add((n, last_only, features, capacity))
        return len(todo) * calls

    def synchronize(self) -> None:
        """Wait for the output device's queued work (CUDA); a no-op on a CPU."""
        synchronize(self.output_device)

    def verify_costs(self) -> dict[int, float] | None:
        """Seconds of a forward of n tokens measured at load, for the draft-length cost model: None here
        (the torch engine's verify grows little with n on a CPU; the cost model measures as it goes)."""
        return None

    def forget(self) -> None:
        """Nothing is kept between generations here (Pair.forget_prompts)."""

    def new_cache(self) -> AnyCache:
        """An empty cache for a new generation. Static: the model's one StaticCache back at position 0
        (a handle from an earlier generation stops working)."""
        if self._static is not None:
            return self._static.fresh()
        return self._dynamic_cache()

    def _dynamic_cache(self) -> DynamicKV:
        cache = DynamicKV(config=self.model.config)
        if hasattr(cache, "activate_past_recording"):  # sliding-window layers must be able to roll back
            cache.activate_past_recording()
        return cache

    def _run(
        self,
        ids: torch.Tensor,
        cache: Any,
        last_only: bool,
        tree: tuple[Any, Any] | None = None,
        keep: int = 0,
        **extra: Any,
    ) -> Any:
        """The model's forward over ids [n] after what `cache` holds (the output object). tree: (positions
        [n], visible [n, length + n]) for a masked forward (`forward_masked`), which runs eagerly. keep >
        0 (last_only: 1): the LM head runs for the newest `keep` positions only, where the model can."""
        kwargs = {"use_cache": True, **extra}
        keep = 1 if last_only else keep
        if keep and self._has_logits_to_keep:
            kwargs["logits_to_keep"] = keep
        if tree is not None:
            positions, visible = tree
            kwargs["attention_mask"] = self._mask4d(visible, cache.mask_columns(visible.shape[1]))
            kwargs["position_ids"] = positions.to(self.device)[None]
        ids = ids.to(self.device).clone()[None]  # [1, n]; a plain tensor even if the caller's was not
        n = ids.shape[1]
        cache.begin(n)
        kwargs[self._cache_kw] = cache.model_cache
        positions = cache.position_ids(n, ids.device)  # None: the model counts them (a dynamic cache)
        if positions is not None:
            kwargs.setdefault("position_ids", positions)
        if self._compiled is not None and cache.replayable and n <= self.compiled_tokens and tree is None:
            if ids.device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()  # every call its own step: outputs are copied
            out = _copied(self._compiled(input_ids=ids, **kwargs))
        else:  # prefills, forwards longer than compiled_tokens, the first forward on a new cache
            with self._skinny.rows(n) if self._skinny is not None else nullcontext():
                out = self.model(input_ids=ids, **kwargs)
        cache.advance(n)
        return out

    # the loop's first round may run the prompt and its drafts in one forward (`forward`'s keep)
    merges_prefill = True

    def forward(
        self, ids: torch.Tensor, cache: AnyCache, *, last_only: bool = False, keep: int = 0
    ) -> torch.Tensor:
        """Run ids [n] after what `cache` holds; returns logits [n, V] ([1, V] when last_only; [keep, V],
        the newest keep positions', when keep > 0: a prompt and a round's drafts in one forward)."""
        rows = 1 if last_only else keep
        with cache.grad_mode():
            logits = self._run(ids, cache, last_only, keep=keep).logits[0]  # [n|rows, V]
            return logits[-rows:] if rows else logits

    def forward_features(
        self, ids: torch.Tensor, cache: AnyCache, layers: tuple[int, ...], *, last_only: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` that also returns the hidden states `layers` (output_hidden_states indices) of every
        position: (logits [n|1, V], features [n, len(layers) * H], concatenated in the order given)."""
        with cache.grad_mode():
            out = self._run(ids, cache, last_only, output_hidden_states=True)
            logits = out.logits[0]  # [n|1, V]
            device = logits.device
            features = torch.cat([out.hidden_states[i][0].to(device) for i in layers], -1)  # [n, F]
            return (logits[-1:] if last_only else logits), features

    def cache_length(self, cache: AnyCache) -> int:
        """Positions `cache` holds."""
        return cache.length

    def _mask4d(self, visible: torch.Tensor, columns: int) -> torch.Tensor:
        """visible [n, m] (bool: which keys each query sees) -> the model's 4D attention mask [1, 1, n,
        columns] (columns >= m: a static cache's capacity, the rest hidden): boolean for SDPA (as
        transformers builds it), additive float for eager attention."""
        n, m = visible.shape
        full = torch.zeros(n, columns, dtype=torch.bool, device=self.device)
        full[:, :m] = visible.to(self.device)
        if getattr(self.model.config, "_attn_implementation", "sdpa") == "eager":
            dtype = self.model.dtype
            mask = torch.zeros(n, columns, dtype=dtype, device=self.device)
            return mask.masked_fill(~full, torch.finfo(dtype).min)[None, None]
        return full[None, None]

    def forward_masked(
        self,
        ids: torch.Tensor,
        cache: AnyCache,
        positions: torch.Tensor,
        visible: torch.Tensor,
        layers: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A forward over ids [n] after the `length` positions `cache` holds, each token at its own
        position (positions [n]) seeing only the keys `visible` [n, length + n] allows (a token tree:
        the prefix and its ancestors) -> (logits [n, V], the hidden states `layers` [n, F] or None). The
        cache grows by n positions; `keep` then compacts them."""
        extra = {"output_hidden_states": True} if layers else {}
        with cache.grad_mode():
            out = self._run(ids, cache, False, tree=(positions, visible), **extra)
            logits = out.logits[0]  # [n, V]
            if not layers:
                return logits, None
            features = torch.cat([out.hidden_states[i][0].to(logits.device) for i in layers], -1)
            return logits, features

    @staticmethod
    def keep(cache: AnyCache, n: int, kept: list[int]) -> None:
        """Of the newest n positions keep only `kept` (ascending offsets into them), moved to the front of
        that block in order; the rest are dropped. A tree's verify block becomes its accepted path."""
        if kept != list(range(len(kept))):  # else they already sit in front
            with cache.grad_mode():
                cache.compact(n, kept)
        cache.rewind(n - len(kept))

    @property
    def sliding_window(self) -> int | None:
        """The shortest sliding window among the model's cache layers, or None without sliding layers."""
        windows = [
            getattr(layer, "sliding_window", None)
            for layer in self._dynamic_cache().layers
            if getattr(layer, "is_sliding", False)
        ]
        return min((w for w in windows if w), default=None)

    @staticmethod
    def rewind(cache: AnyCache, n: int) -> None:
        """Drop the newest n >= 0 positions from the cache (a dynamic cache crops them, a static one
        moves its position back); with n = 0 a dynamic cache settles."""
        cache.rewind(n)

    @staticmethod
    def settle(cache: AnyCache) -> None:
        """After a forward whose positions all stay: trim sliding-window layers back to their window
        (a dynamic cache; a static one has no sliding layers)."""
        cache.settle()


class DynamicKV(DynamicCache):
    """transformers' DynamicCache with the interface `StaticKV` has, so `CachedLM` never asks which kind
    of cache it holds: the model receives it as it is (model_cache), positions are the model's to count
    (position_ids None), no compiled call replays on it, and rewind / compact / settle / grad_mode are
    its own."""

    @property
    def model_cache(self) -> DynamicKV:
        return self

    @property
    def length(self) -> int:
        """Positions the cache holds."""
        return self.get_seq_length()

    replayable = False  # compiled calls run on static caches only

    def mask_columns(self, seen: int) -> int:
        """Key columns of a 4D mask for a masked forward seeing `seen` keys: exactly those."""
        return seen

    def begin(self, n: int) -> None:
        """Nothing to check before a forward: a dynamic cache grows as it needs."""

    def position_ids(self, n: int, device: torch.device) -> None:
        return None

    def advance(self, n: int) -> None:
        """The forward appended the positions itself."""

    def compact(self, n: int, kept: list[int]) -> None:
        """Of the newest n positions, move `kept` (ascending offsets) to the front of that block (each
        layer's own newest n: a sliding layer's total differs)."""
        for layer in self.layers:
            if getattr(layer, "is_initialized", True) and layer.keys is not None:
                compact_positions(layer.keys, layer.values, layer.keys.shape[-2] - n, kept)

    def rewind(self, n: int) -> None:
        """Drop the newest n >= 0 positions (transformers 5: a negative crop removes); n = 0 settles."""
        if n > 0:
            self.crop(-n)
        else:
            self.settle()

    def settle(self) -> None:
        """After a forward whose positions all stay: trim sliding-window layers back to their window.
        Recording layers keep every position until a crop so they can roll back; transformers < 5.18
        needs that crop before the next forward, later versions free the memory with it."""
        if any(getattr(layer, "is_sliding", False) for layer in self.layers):
            self.crop(0)

    @contextmanager
    def grad_mode(self) -> Iterator[None]:
        """inference_mode: the cache's tensors live only inside the engine's forwards."""
        with torch.inference_mode():
            yield


def _copied(out: Any) -> Any:
    """A compiled call's logits (and hidden states) copied out: CUDA graphs reuse their output memory on
    the next replay."""
    out.logits = out.logits.clone()
    if getattr(out, "hidden_states", None) is not None:
        out.hidden_states = tuple(h.clone() for h in out.hidden_states)
    return out
