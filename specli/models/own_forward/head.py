"""The lean step of an EAGLE head (docs/design.md §13): `EagleHead.step`'s arithmetic over a
preallocated `LeanKV` (rewound by position instead of concatenated and sliced), with rotary cos/sin from
a table, each layer's q/k/v fused into one matrix (a copy: heads are small) and no mask for a single
position. The head's other parts (fc, norm, LM head, embeddings) are used as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from specli.models.eagle_head import EagleHead, rope_frequencies
from specli.models.own_forward.core import LeanKV, RotaryTable, attend, attend_masked, rms, split_heads


@dataclass
class _HeadLayer:
    input_norm: torch.Tensor  # [H]
    hidden_norm: torch.Tensor | None  # [H] (eagle3's layer 0)
    qkv: torch.Tensor  # [(heads + 2 kv_heads) * d, attention input]
    o: torch.Tensor  # [H, heads * d]
    post_norm: torch.Tensor
    gate: torch.Tensor  # [I, H]
    up: torch.Tensor
    down: torch.Tensor  # [H, I]


class LeanHead:
    """Runs an EagleHead's decoder layers with `step`'s contract over a LeanKV cache."""

    def __init__(self, head: EagleHead) -> None:
        c = head.config
        self.head = head
        self.eagle3 = c.kind == "eagle3"
        self.heads, self.kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.eps = c.rms_norm_eps
        self.scale = c.head_dim**-0.5
        self.norm_before_residual = c.norm_before_residual
        with torch.no_grad():
            self.layers = [_layer(layer) for layer in head.layers]
        weight = head.fc.weight
        self.dtype, self.device = weight.dtype, weight.device
        inv, scaling = rope_frequencies(c)
        self.rotary = RotaryTable(inv, scaling, self.dtype, self.device)

    def new_cache(self) -> LeanKV:
        with torch.inference_mode():
            return LeanKV.empty(len(self.layers), self.kv_heads, self.head_dim, self.dtype, self.device)

    @torch.inference_mode()
    def step(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        cache: LeanKV,
        positions: torch.Tensor | None = None,
        visible: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`EagleHead.step` at the n positions after what cache holds: embeds [n, H], hidden [n, H] (fused
        features or the head's own states) -> the last layer's output states [n, H]; the cache grows by n.
        A token tree's step gives each position its own (positions [n]) and the keys it sees (visible
        [n, length + n])."""
        n, start = embeds.shape[0], cache.length
        cache.reserve(n)
        cos, sin = self.rotary.at(start, n) if positions is None else self.rotary.rows(positions)  # [n, d]
        if visible is not None:
            visible = visible.to(self.device)
        first = self.layers[0]
        if self.eagle3:  # attention reads cat(input_norm(embeds), hidden_norm(hidden)) [n, 2H]
            normed = rms(hidden, first.hidden_norm, self.eps)
            x = normed if self.norm_before_residual else hidden
            attention_input = torch.cat([rms(embeds, first.input_norm, self.eps), normed], -1)
        else:  # eagle1: fc fuses (embedding, feature); then a plain Llama layer
            x = self.head.fc(torch.cat([embeds, hidden], -1))
            attention_input = rms(x, first.input_norm, self.eps)
        for i, layer in enumerate(self.layers):
            if i > 0:
                attention_input = rms(x, layer.input_norm, self.eps)
            qkv = F.linear(attention_input, layer.qkv)
            q, k, v = split_heads(qkv, self.heads, self.kv_heads, cos, sin)
            keys, values = cache.write(i, k, v)  # [kv_heads, start + n, d]
            if visible is None:
                attn = attend(q, keys, values, start, self.scale)
            else:
                attn = attend_masked(q, keys, values, visible, self.scale)
            x = x + F.linear(attn, layer.o)
            h = rms(x, layer.post_norm, self.eps)
            x = x + F.linear(F.silu(F.linear(h, layer.gate)) * F.linear(h, layer.up), layer.down)
        cache.advance(n)
        return x


def _layer(layer: torch.nn.Module) -> _HeadLayer:
    a, m = layer.self_attn, layer.mlp
    hidden_norm = getattr(layer, "hidden_norm", None)
    return _HeadLayer(
        input_norm=layer.input_layernorm.weight,
        hidden_norm=hidden_norm.weight if hidden_norm is not None else None,
        qkv=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
        o=a.o_proj.weight,
        post_norm=layer.post_attention_layernorm.weight,
        gate=m.gate_proj.weight,
        up=m.up_proj.weight,
        down=m.down_proj.weight,
    )
