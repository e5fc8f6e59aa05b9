"""EAGLE draft heads: a few decoder layers (usually one) that draft from the target's own hidden states.

Two kinds share one module (docs/design.md §7):

- **eagle1** (EAGLE-1): the layer reads fc(cat(embedding, feature)) [2H -> H], where the feature is the
  target's top hidden state (after its final norm); the layer's output is a predicted next feature, and
  the target's own LM head turns it into the draft distribution.
- **eagle3** (EAGLE-3): fc fuses the target's low, mid and high features [n·H_t -> H]; the layer's
  attention reads cat(input_norm(embedding), hidden_norm(fused)) [2H]; the head has its own final norm
  and LM head, possibly over a reduced draft vocabulary with a draft -> target id map (`d2t`: target id =
  draft id + d2t[draft id]).

Alignment: head position t pairs the feature of token x_t with the embedding of x_{t+1} and predicts
x_{t+2}. When drafting past the known features, the head's own output state at t stands in for the
missing feature at t+1 (eagle3 feeds it without fc; eagle1 through fc like a real feature).

An eagle3 head may have N > 1 decoder layers (speculators' `num_hidden_layers`; public P-EAGLE heads
have 4): layer 0 is the fusing layer above, layers 1..N-1 are plain Llama decoder layers [H -> H] on the
previous layer's output, all at the same positions; the last layer's output is the head's state (fed to
its norm and LM head, and back as the next step's hidden input). eagle1 heads have one layer.

The head keeps its own KV cache (`HeadCache`): one (keys, values) pair per layer, all of the same length,
cut back together to any length.

**P-EAGLE** (parallel drafting, docs/design.md §10) is an eagle3 head with a `mask_token_id` and a learned
`mask_hidden` [1, 1, F] standing in for the target features that do not exist yet: after the true pairs,
k-1 placeholder positions (the embedding of the mask token, fc(mask_hidden)) give d_2..d_k in the same
forward. Such heads carry their own trained token embeddings (`embed_tokens`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

KINDS = ("eagle1", "eagle3")


@dataclass(frozen=True)
class HeadConfig:
    """The shape of a head. `aux_layers` are the target hidden states it reads, by transformers'
    output_hidden_states index (i is the input of target layer i; the target's depth L is its final,
    normed output). `num_layers` are the head's own decoder layers."""

    kind: str
    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    target_hidden_size: int
    target_vocab_size: int
    draft_vocab_size: int
    aux_layers: tuple[int, ...]
    num_layers: int = 1  # decoder layers: the fusing layer 0, then plain Llama layers (eagle3 only)
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    norm_before_residual: bool = False
    fc_bias: bool = False
    rope_scaling: dict[str, Any] | None = None  # transformers' rope parameters (e.g. Llama 3's "llama3")
    mask_token_id: int | None = None  # set: a P-EAGLE head (parallel drafting; eagle3 only)
    own_embeddings: bool = False  # the head carries its own token embeddings [V_target, H]
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown head kind {self.kind!r}; one of {KINDS}")
        if self.kind == "eagle1" and self.draft_vocab_size != self.target_vocab_size:
            raise ValueError(
                "an eagle1 head drafts through the target's LM head: its vocabulary is the target's"
            )
        if self.num_layers < 1:
            raise ValueError(f"a head needs at least one decoder layer, not {self.num_layers}")
        if self.kind == "eagle1" and self.num_layers != 1:
            raise ValueError(f"an eagle1 head has one decoder layer, not {self.num_layers}")
        if self.mask_token_id is not None and self.kind != "eagle3":
            raise ValueError("parallel drafting (a mask token) needs an eagle3 head")
        if self.mask_token_id is not None and not 0 <= self.mask_token_id < self.target_vocab_size:
            raise ValueError(
                f"mask_token_id {self.mask_token_id} is outside the vocabulary of {self.target_vocab_size}"
            )

    @property
    def parallel(self) -> bool:
        """A P-EAGLE head: drafts all k tokens in one forward."""
        return self.mask_token_id is not None

    @property
    def label(self) -> str:
        """eagle1 | eagle3 | peagle, as Round.info and the views name the head."""
        return "peagle" if self.parallel else self.kind

    @property
    def reduced_vocab(self) -> bool:
        return self.draft_vocab_size != self.target_vocab_size

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aux_layers"] = list(self.aux_layers)
        return d


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's default features: those entering layers 2, L//2 and L-3 (low -> high)."""
    return (min(2, num_layers - 1), num_layers // 2, max(0, num_layers - 3))


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_frequencies(config: HeadConfig) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [head_dim / 2], attention scaling) of the head's rotary embedding: plain RoPE
    at rope_theta, or transformers' own computation for a scaled type (llama3, yarn, linear, ...)."""
    d = config.head_dim
    scaling = dict(config.rope_scaling or {})
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind == "default":
        return 1.0 / config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d), 1.0
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if kind not in ROPE_INIT_FUNCTIONS:
        raise ValueError(f"unknown rope type {kind!r}")
    llama = LlamaConfig(
        hidden_size=config.hidden_size,
        num_attention_heads=config.num_heads,
        head_dim=d,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters={**scaling, "rope_type": kind, "rope_theta": config.rope_theta},
    )
    inv, attention_scaling = ROPE_INIT_FUNCTIONS[kind](llama)
    return inv.float(), float(attention_scaling)


def rotate(x: torch.Tensor, positions: torch.Tensor, inv: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Rotary embedding (Llama's half-split layout) of x [..., n, d] at positions [n], with inverse
    frequencies inv [d/2] and transformers' attention scaling of cos and sin."""
    angles = positions.to(x.device, torch.float32)[:, None] * inv.to(x.device)[None]  # [n, d/2]
    cos = (torch.cat([angles.cos(), angles.cos()], -1) * scale).to(x.dtype)  # [n, d]
    sin = (torch.cat([angles.sin(), angles.sin()], -1) * scale).to(x.dtype)
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


@dataclass
class HeadCache:
    """The head's keys and values, per decoder layer [kv_heads, T, head_dim] (batch 1). Every step runs
    all layers over the same positions, so they all hold the same length."""

    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.keys[0].shape[1] if self.keys else 0

    def append(self, k: torch.Tensor, v: torch.Tensor, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Add n positions to `layer` (layers fill in order on the first step) -> all its keys, values."""
        if layer == len(self.keys):
            self.keys.append(k)
            self.values.append(v)
        elif layer < len(self.keys):
            self.keys[layer] = torch.cat([self.keys[layer], k], 1)
            self.values[layer] = torch.cat([self.values[layer], v], 1)
        else:
            raise ValueError(f"layer {layer} appended before layer {len(self.keys)}")
        return self.keys[layer], self.values[layer]

    def crop(self, length: int) -> None:
        """Keep the first `length` positions of every layer."""
        self.keys = [k[:, :length] for k in self.keys]
        self.values = [v[:, :length] for v in self.values]


class EagleHead(nn.Module):
    """EAGLE decoder layers with their input fusion and (eagle3) their own norm and LM head.

    Weight names follow the `speculators` layout: fc, layers.0.{self_attn,mlp,input_layernorm,
    hidden_norm,post_attention_layernorm}, layers.i.{self_attn,mlp,input_layernorm,
    post_attention_layernorm} for i in 1..N-1, norm, lm_head, d2t / t2d buffers (eagle3).
    """

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.config = c = config
        h = c.hidden_size
        eagle3 = c.kind == "eagle3"
        fused_in = len(c.aux_layers) * c.target_hidden_size if eagle3 else 2 * h
        self.fc = nn.Linear(fused_in, h, bias=c.fc_bias)
        self.layers = nn.ModuleList([_Layer(c, i) for i in range(c.num_layers)])
        if eagle3:
            self.norm = RMSNorm(h, c.rms_norm_eps)
            self.lm_head = nn.Linear(h, c.draft_vocab_size, bias=False)
            self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.long))
            self.register_buffer("t2d", torch.ones(c.target_vocab_size, dtype=torch.bool))
        if c.own_embeddings:
            self.embed_tokens = nn.Embedding(c.target_vocab_size, h)
        if c.parallel:
            self.mask_hidden = nn.Parameter(torch.zeros(1, 1, fused_in))  # [1, 1, F] as speculators stores it

    @property
    def layer(self) -> _Layer:
        """Layer 0 (the one that reads the fused input)."""
        return self.layers[0]

    def placeholders(self, n: int) -> torch.Tensor:
        """The hidden input of n placeholder positions (P-EAGLE): fc(mask_hidden) repeated -> [n, H]."""
        return self.fuse(self.mask_hidden.view(1, -1)).expand(n, -1)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """Target features [n, F] -> the layer's hidden input [n, H] (eagle3: fc; eagle1: as they are)."""
        return self.fc(features) if self.config.kind == "eagle3" else features

    def step(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        cache: HeadCache,
        visible: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run n new positions after what cache holds: embeds [n, H], hidden [n, H] (fused features or
        the head's own states) -> the last layer's output states [n, H]; appends n keys/values to each
        layer's cache. visible [n, T + n] (a token tree's mask: which keys each position sees) replaces
        the causal mask."""
        if self.config.kind == "eagle1":
            return self.layer(self.fc(torch.cat([embeds, hidden], -1)), positions, cache, visible)  # [n, H]
        x = self.layer.forward_eagle3(embeds, hidden, positions, cache, visible)  # [n, H]
        for layer in self.layers[1:]:
            x = layer(x, positions, cache, visible)
        return x

    def draft_logits(self, states: torch.Tensor, target_head: nn.Module | None = None) -> torch.Tensor:
        """Output states [n, H] -> logits over the draft vocabulary [n, V_draft] (eagle1: the target's
        LM head, given as target_head)."""
        if self.config.kind == "eagle1":
            if target_head is None:
                raise ValueError("an eagle1 head needs the target's LM head")
            return target_head(states.to(target_head.weight.dtype))
        return self.lm_head(self.norm(states))

    def draft_to_target(self) -> torch.Tensor | None:
        """Target ids of the draft vocabulary [V_draft] (None when the vocabularies are the same)."""
        if not self.config.reduced_vocab:
            return None
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t


class _Layer(nn.Module):
    """A Llama decoder layer; an eagle3 head's layer 0 has a hidden_norm and its attention reads [2H]."""

    def __init__(self, c: HeadConfig, index: int = 0) -> None:
        super().__init__()
        self.c, self.index = c, index
        h, d = c.hidden_size, c.head_dim
        fusing = c.kind == "eagle3" and index == 0
        attn_in = 2 * h if fusing else h
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(attn_in, c.num_heads * d, bias=False)
        self.self_attn.k_proj = nn.Linear(attn_in, c.num_kv_heads * d, bias=False)
        self.self_attn.v_proj = nn.Linear(attn_in, c.num_kv_heads * d, bias=False)
        self.self_attn.o_proj = nn.Linear(c.num_heads * d, h, bias=False)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(h, c.intermediate_size, bias=False)
        self.mlp.up_proj = nn.Linear(h, c.intermediate_size, bias=False)
        self.mlp.down_proj = nn.Linear(c.intermediate_size, h, bias=False)
        self.input_layernorm = RMSNorm(h, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(h, c.rms_norm_eps)
        if fusing:
            self.hidden_norm = RMSNorm(h, c.rms_norm_eps)
        self._inv_freq, self.rope_scale = rope_frequencies(c)  # [head_dim / 2] float32, not a weight

    def qkv(
        self, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [n, attn_in] -> q [heads, n, d], k and v [kv_heads, n, d], rotated at positions."""
        c, a = self.c, self.self_attn
        n = x.shape[0]
        q = a.q_proj(x).view(n, c.num_heads, c.head_dim).transpose(0, 1)
        k = a.k_proj(x).view(n, c.num_kv_heads, c.head_dim).transpose(0, 1)
        v = a.v_proj(x).view(n, c.num_kv_heads, c.head_dim).transpose(0, 1)
        return self.rope(q, positions), self.rope(k, positions), v

    def rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [..., n, d] rotated at positions [n] (frequencies kept in float32 beside x)."""
        if self._inv_freq.device != x.device:
            self._inv_freq = self._inv_freq.to(x.device)
        return rotate(x, positions, self._inv_freq, self.rope_scale)

    def attend(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Causal attention of the n newest queries over all keys (or the keys `visible` [n, T] allows)
        -> [n, H]."""
        c = self.c
        n, total = q.shape[1], keys.shape[1]
        groups = c.num_heads // c.num_kv_heads
        if groups > 1:
            keys, values = keys.repeat_interleave(groups, 0), values.repeat_interleave(groups, 0)
        if visible is not None:
            mask = visible.to(q.device)
        else:
            mask = torch.ones(n, total, dtype=torch.bool, device=q.device).tril(total - n)  # [n, T]
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # [heads, n, d]
        return self.self_attn.o_proj(out.transpose(0, 1).reshape(n, c.num_heads * c.head_dim))

    def _finish(self, residual: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        h = residual + attn
        m = self.mlp
        x = self.post_attention_layernorm(h)
        return h + m.down_proj(F.silu(m.gate_proj(x)) * m.up_proj(x))

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, cache: HeadCache, visible: torch.Tensor | None = None
    ) -> torch.Tensor:
        """A plain Llama layer (eagle1's layer on its fused input; eagle3's layers 1..N-1): x [n, H] ->
        [n, H]."""
        q, k, v = self.qkv(self.input_layernorm(x), positions)
        keys, values = cache.append(k, v, self.index)
        return self._finish(x, self.attend(q, keys, values, visible))

    def forward_eagle3(
        self,
        embeds: torch.Tensor,
        hidden: torch.Tensor,
        positions: torch.Tensor,
        cache: HeadCache,
        visible: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """eagle3: attention reads cat(input_norm(embeds), hidden_norm(hidden)) [n, 2H] -> [n, H]."""
        normed = self.hidden_norm(hidden)
        residual = normed if self.c.norm_before_residual else hidden
        x = torch.cat([self.input_layernorm(embeds), normed], -1)  # [n, 2H]
        q, k, v = self.qkv(x, positions)
        keys, values = cache.append(k, v, self.index)
        return self._finish(residual, self.attend(q, keys, values, visible))


def init_weights(head: EagleHead, std: float = 0.02, seed: int | None = None) -> EagleHead:
    """Normal(0, std) linear weights, unit norms (as a fresh Llama layer)."""
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    for module in head.modules():
        if isinstance(module, nn.Linear):
            with torch.no_grad():
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * std)
                if module.bias is not None:
                    module.bias.zero_()
    return head
