"""Run a Llama-family causal LM a slice of decoder layers at a time, through the model's own modules.

Self-speculation drafts with the first E layers and verifies with the rest; LayerSkip training scores
exits after every layer. Both drive the model's embeddings, rotary embedding, decoder layers, final norm
and LM head exactly as its own forward does; attention is never reimplemented. Only architectures whose
forward is exactly that sequence are accepted (others scale embeddings or logits, or differ otherwise).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from specli.errors import UsageError

LAYER_STACK_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "phi3")


def check_architecture(model_type: str, strategy: str = "self") -> None:
    """Raise a UsageError unless model_type is one the layer-stack strategies support."""
    if model_type not in LAYER_STACK_ARCHITECTURES:
        raise UsageError(
            f"strategy '{strategy}' does not support the '{model_type}' architecture.",
            f"It supports {', '.join(LAYER_STACK_ARCHITECTURES)}; use --strategy draft, lookup or none.",
        )


def check_layer_stack(model: Any, strategy: str = "self") -> None:
    """Raise a UsageError unless model is a supported Llama-family causal LM with the usual modules."""
    check_architecture(getattr(model.config, "model_type", "?"), strategy)
    backbone = getattr(model, "model", None)
    parts = ("embed_tokens", "layers", "norm", "rotary_emb")
    if not all(hasattr(backbone, p) for p in parts) or not hasattr(model, "lm_head"):
        raise UsageError(
            f"strategy '{strategy}' cannot drive this '{model.config.model_type}' model's layers.",
            "Use --strategy draft, lookup or none.",
        )


@dataclass
class LayerInputs:
    """What every decoder layer of one call needs besides the hidden states."""

    position_ids: torch.Tensor  # [1, n]
    rotary: Any  # (cos, sin) from the model's rotary embedding
    masks: dict[str, Any]  # layer type -> mask in the format of the model's attention implementation


class LayerStack:
    """The decoder layers of a causal LM, callable a range at a time, with or without a KV cache."""

    def __init__(self, model: Any) -> None:
        check_layer_stack(model)
        self.model = model
        self.backbone = model.model
        self.layers = self.backbone.layers
        self.num_layers = len(self.layers)
        config = model.config
        self.layer_types = list(getattr(config, "layer_types", None) or ["full_attention"] * self.num_layers)
        params = inspect.signature(self.layers[0].forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, n] -> hidden states [B, n, d]."""
        return self.backbone.embed_tokens(ids.to(self.backbone.embed_tokens.weight.device))

    def prepare(
        self, hidden: torch.Tensor, position_ids: torch.Tensor, cache: Any, start: int, end: int
    ) -> LayerInputs:
        """Masks and rotary tables for running layers [start, end) on hidden [B, n, d] at position_ids.

        With a cache, the mask of each layer type is sized from the first layer of that type in the range,
        so a range whose layers hold more (or fewer) positions than layer 0 is still masked right.
        """
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        makers = {
            "full_attention": create_causal_mask,
            "sliding_attention": create_sliding_window_causal_mask,
        }
        masks: dict[str, Any] = {}
        for index in range(start, end):
            kind = self.layer_types[index]
            if kind not in masks:
                if kind not in makers:
                    raise UsageError(f"layer type '{kind}' is not supported by the layer-stack strategies.")
                masks[kind] = makers[kind](
                    self.model.config, hidden, None, cache, position_ids=position_ids, layer_idx=index
                )
        rotary = self.backbone.rotary_emb(hidden, position_ids=position_ids)
        return LayerInputs(position_ids, rotary, masks)

    def layer(self, index: int, hidden: torch.Tensor, inputs: LayerInputs, cache: Any = None) -> torch.Tensor:
        """Run decoder layer `index` (appending its keys/values to cache when given)."""
        return self.layers[index](
            hidden,
            attention_mask=inputs.masks[self.layer_types[index]],
            position_embeddings=inputs.rotary,
            position_ids=inputs.position_ids,
            use_cache=cache is not None,
            **{self._cache_kw: cache},
        )

    def run(
        self, hidden: torch.Tensor, start: int, end: int, first_position: int, cache: Any
    ) -> torch.Tensor:
        """Layers [start, end) on hidden [1, n, d] whose first token sits at first_position."""
        n = hidden.shape[1]
        position_ids = torch.arange(first_position, first_position + n, device=hidden.device)[None]  # [1, n]
        inputs = self.prepare(hidden, position_ids, cache, start, end)
        for index in range(start, end):
            hidden = self.layer(index, hidden, inputs, cache)
        return hidden

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The shared final norm + LM head on hidden states of any depth: [..., d] -> [..., V]."""
        return self.model.lm_head(self.backbone.norm(hidden))
