"""The model seam: what the loop asks of a target model, whatever evaluates it. The torch engine's
`CachedLM` (transformers' forwards over a dynamic or static KV cache) and the llama.cpp engine's
`LlamaLM` (a GGUF file in llama.cpp's own quantization) implement it; so would a third engine (docs/
design.md §2, "Engines"). The engine owns the protocol; implementations satisfy it structurally and
import nothing of the engine.

A cache is the implementation's own object, opaque to the loop: each kind keeps its switches inside
(how it rewinds, compacts a tree's path, counts positions).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


class TargetModel(Protocol):
    """A causal LM the loop drives one forward at a time over a KV cache it can rewind.

    engine: the name of what evaluates it ("torch", "llama.cpp"); output_device: where its logits land
    (verification and sampling happen there); vocab_size: the logits' width; sliding_window: the
    shortest sliding-attention window a rewind or a tree must stay inside (None: none)."""

    engine: str

    @property
    def output_device(self) -> torch.device: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def sliding_window(self) -> int | None: ...

    def new_cache(self) -> Any:
        """An empty cache for a new generation."""
        ...

    def cache_length(self, cache: Any) -> int:
        """Positions `cache` holds."""
        ...

    def forward(self, ids: torch.Tensor, cache: Any, *, last_only: bool = False) -> torch.Tensor:
        """ids [n] after what `cache` holds -> logits [n, V] ([1, V] when last_only); the cache grows.
        An implementation with `merges_prefill` True also takes keep=m > 0: logits [m, V] of the newest
        m positions only, the LM head run for those alone (the loop's first round then runs the prompt
        and its drafts in one forward, docs/design.md §3); without the attribute the loop never asks."""
        ...

    def forward_features(
        self, ids: torch.Tensor, cache: Any, layers: tuple[int, ...], *, last_only: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward` that also returns the hidden states `layers` of every position [n, F], for drafters
        that read features (EAGLE); an engine without them raises SpecliError (the strategy refuses it
        before any forward: the engine table's refusals)."""
        ...

    def forward_masked(
        self,
        ids: torch.Tensor,
        cache: Any,
        positions: torch.Tensor,
        visible: torch.Tensor,
        layers: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A token tree's forward: ids [n] at `positions` [n], each seeing the keys `visible` [n, length +
        n] allows -> (logits [n, V], features [n, F] or None)."""
        ...

    def keep(self, cache: Any, n: int, kept: list[int]) -> None:
        """Of the newest n positions keep only `kept` (ascending offsets): a tree's accepted path."""
        ...

    def rewind(self, cache: Any, n: int) -> None:
        """Drop the newest n >= 0 positions (the rejected drafts)."""
        ...

    def settle(self, cache: Any) -> None:
        """After a forward whose positions all stay (sliding layers trim back to their window)."""
        ...

    def verify_costs(self) -> dict[int, float] | None:
        """Seconds of a forward of n tokens, timed once, as the cost model's prior (None: not timed)."""
        ...

    def synchronize(self) -> None:
        """Wait for queued device work, so clocks read after it are true (a no-op on a CPU)."""
        ...
