"""A causal LM driven one forward at a time over a KV cache it can rewind (docs/design.md §3, §5)."""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel

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


class CachedLM:
    """Wraps a transformers causal LM: `forward` appends tokens to a cache, `rewind` drops the newest."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        params = inspect.signature(model.forward).parameters
        # transformers 5.24 names it `cache`; 5.17 only knows `past_key_values` (docs/design.md §5).
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._has_logits_to_keep = "logits_to_keep" in params

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

    def new_cache(self) -> DynamicCache:
        cache = DynamicCache(config=self.model.config)
        if hasattr(cache, "activate_past_recording"):  # sliding-window layers must be able to roll back
            cache.activate_past_recording()
        return cache

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: DynamicCache, *, last_only: bool = False) -> torch.Tensor:
        """Run ids [n] after what `cache` holds; returns logits [n, V] (or [1, V] when last_only)."""
        kwargs = {self._cache_kw: cache, "use_cache": True}
        if last_only and self._has_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        logits = self.model(input_ids=ids.to(self.device)[None], **kwargs).logits[0]  # [n|1, V]
        return logits[-1:] if last_only else logits

    @torch.inference_mode()
    def forward_features(
        self, ids: torch.Tensor, cache: DynamicCache, layers: tuple[int, ...], *, last_only: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` that also returns the hidden states `layers` (output_hidden_states indices) of every
        position: (logits [n|1, V], features [n, len(layers) * H], concatenated in the order given)."""
        kwargs = {self._cache_kw: cache, "use_cache": True, "output_hidden_states": True}
        if last_only and self._has_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(input_ids=ids.to(self.device)[None], **kwargs)
        logits = out.logits[0]  # [n|1, V]
        device = logits.device
        features = torch.cat([out.hidden_states[i][0].to(device) for i in layers], -1)  # [n, F]
        return (logits[-1:] if last_only else logits), features

    @property
    def sliding_window(self) -> int | None:
        """The shortest sliding window among the model's cache layers, or None without sliding layers."""
        windows = [
            getattr(layer, "sliding_window", None)
            for layer in self.new_cache().layers
            if getattr(layer, "is_sliding", False)
        ]
        return min((w for w in windows if w), default=None)

    @staticmethod
    def rewind(cache: DynamicCache, n: int) -> None:
        """Drop the newest n >= 0 positions from the cache (transformers 5: negative crop removes); with
        n = 0, settle it."""
        if n > 0:
            cache.crop(-n)
        else:
            CachedLM.settle(cache)

    @staticmethod
    def settle(cache: DynamicCache) -> None:
        """After a forward whose positions all stay: trim sliding-window layers back to their window.

        Recording layers keep every position until a crop so they can roll back; transformers < 5.18
        needs that crop before the next forward, later versions free the memory with it.
        """
        if any(getattr(layer, "is_sliding", False) for layer in cache.layers):
            cache.crop(0)
