"""specli's own forward for Llama-family draft models (docs/design.md §13): the same arithmetic as the
model's forward without its per-step overhead (module calls, mask and cache objects, output objects).

Weights are the loaded model's own tensors; a small model's q/k/v are also copied into one matrix (one
matmul instead of three; past FUSE_LIMIT_BYTES the copy would cost memory and save nothing). Keys and
values go into a preallocated `LeanKV` rewound by position; rotary cos/sin come from a table built
once from the model's own rotary module. A single-token step needs no mask (one query attends every
key it may); a pass of n tokens builds its causal (and sliding-window) mask.

`LeanDecoder.build(model)` returns None with the reason when the model is not one it reproduces (another
architecture, quantized or split weights, a length-dependent rotary embedding), or when its logits
differ from the model's own forward on a probe; the caller then keeps the model's forward.
It has the `CachedLM` methods a `DraftModelDrafter` calls (new_cache, forward, rewind, settle,
output_device), so drafting is the same code either way; only a drafter's proposals come from it, never
the target's verify, so the output stays exactly the target's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from specli.models.own_forward.core import LeanKV, RotaryTable, attend, attend_masked, rms, split_heads

LEAN_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")  # decoder layers of the same shape
LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")  # their frequencies change with the sequence length
FUSE_LIMIT_BYTES = 64 * 2**20  # q/k/v are fused (copied into one matrix) up to this size; past it the
# matmuls dominate and the copy would only cost memory
PROBE_TOKENS = 8  # the probe: a prefill of 5, a step of 1, a rewind, a pass of 3


class LeanUnsupported(Exception):
    """Why a model has no lean forward (the caller keeps the model's own)."""


@dataclass
class _Layer:
    """One decoder layer's weights: the model's own tensors, q/k/v possibly fused into one copy."""

    input_norm: torch.Tensor  # [H]
    qkv: list[torch.Tensor]  # [(heads + 2 kv_heads) * d, H] fused, or the q, k, v weights apart
    qkv_bias: list[torch.Tensor | None]
    q_norm: torch.Tensor | None  # [d] (Qwen3)
    k_norm: torch.Tensor | None
    o: torch.Tensor  # [H, heads * d]
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor  # [H]
    gate: torch.Tensor  # [I, H]
    gate_bias: torch.Tensor | None
    up: torch.Tensor  # [I, H]
    up_bias: torch.Tensor | None
    down: torch.Tensor  # [H, I]
    down_bias: torch.Tensor | None
    window: int | None  # sliding window (positions a query may look back, itself included)


class LeanDecoder:
    """A Llama / Mistral / Qwen2 / Qwen3 causal LM's forward over a LeanKV cache."""

    def __init__(self, model: nn.Module) -> None:
        """LeanUnsupported when the model is not one this forward reproduces (no probe: see `build`)."""
        config = model.config
        _check_supported(model)
        inner = model.model
        self.model = model
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.scale = self.head_dim**-0.5
        self.embed = inner.embed_tokens.weight  # [V, H]
        self.norm = inner.norm.weight
        self.lm_head = model.get_output_embeddings().weight  # [V, H]
        self.lm_head_bias = model.get_output_embeddings().bias
        self.dtype = self.embed.dtype
        self._device = self.embed.device
        fuse = _qkv_bytes(inner.layers) <= FUSE_LIMIT_BYTES
        self.layers = [_layer(layer, _window(config, i), fuse) for i, layer in enumerate(inner.layers)]
        rotary = inner.rotary_emb
        self.rotary = RotaryTable(rotary.inv_freq, float(rotary.attention_scaling), self.dtype, self._device)

    @classmethod
    def build(cls, model: nn.Module) -> tuple[LeanDecoder | None, str | None]:
        """(the lean forward, None), or (None, why not) when the model is not supported or the probe's
        logits differ from the model's own forward."""
        try:
            lean = cls(model)
            lean.probe()
        except LeanUnsupported as e:
            return None, str(e)
        return lean, None

    # --- the CachedLM surface a DraftModelDrafter uses ----------------------------------------------

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def output_device(self) -> torch.device:
        return self.lm_head.device

    @property
    def vocab_size(self) -> int:
        return self.lm_head.shape[0]

    def new_cache(self) -> LeanKV:
        with torch.inference_mode():
            return LeanKV.empty(len(self.layers), self.kv_heads, self.head_dim, self.dtype, self._device)

    @staticmethod
    def rewind(cache: LeanKV, n: int) -> None:
        cache.rewind(n)

    @staticmethod
    def settle(cache: LeanKV) -> None:
        """Nothing to trim: windows are applied by the mask, every position stays."""

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: LeanKV, *, last_only: bool = False) -> torch.Tensor:
        """Run ids [n] after what `cache` holds -> logits [n, V] (or [1, V] when last_only); the cache
        grows by n positions."""
        ids = ids.to(self._device)
        n, start = ids.shape[0], cache.length
        cache.reserve(n)
        cos, sin = self.rotary.at(start, n)  # [n, d]
        x = F.embedding(ids, self.embed)  # [n, H]
        for i, layer in enumerate(self.layers):
            h = rms(x, layer.input_norm, self.eps)
            q, k, v = self._qkv(h, layer, cos, sin)  # [heads|kv_heads, n, d]
            keys, values = cache.write(i, k, v)  # [kv_heads, start + n, d]
            attn = attend(q, keys, values, start, self.scale, layer.window)  # [n, heads * d]
            x = x + F.linear(attn, layer.o, layer.o_bias)
            h = rms(x, layer.post_norm, self.eps)
            gate = F.silu(F.linear(h, layer.gate, layer.gate_bias))  # [n, I]
            x = x + F.linear(gate * F.linear(h, layer.up, layer.up_bias), layer.down, layer.down_bias)
        cache.advance(n)
        if last_only:
            x = x[-1:]
        return F.linear(rms(x, self.norm, self.eps), self.lm_head, self.lm_head_bias)  # [n|1, V]

    @torch.inference_mode()
    def forward_masked(
        self,
        ids: torch.Tensor,
        cache: LeanKV,
        positions: torch.Tensor,
        visible: torch.Tensor,
        layers: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, None]:
        """`CachedLM.forward_masked`: ids [n] at positions [n], each seeing the cache's keys `visible`
        [n, length + n] allows -> (logits [n, V], None); the cache grows by n positions. Sliding windows
        are not applied here: a drafter's tree only changes what is proposed."""
        if layers:
            raise ValueError("the lean forward returns no hidden states")
        ids = ids.to(self._device)
        n = ids.shape[0]
        cache.reserve(n)
        cos, sin = self.rotary.rows(positions)  # [n, d]
        visible = visible.to(self._device)
        x = F.embedding(ids, self.embed)  # [n, H]
        for i, layer in enumerate(self.layers):
            h = rms(x, layer.input_norm, self.eps)
            q, k, v = self._qkv(h, layer, cos, sin)  # [heads|kv_heads, n, d]
            keys, values = cache.write(i, k, v)  # [kv_heads, length + n, d]
            x = x + F.linear(attend_masked(q, keys, values, visible, self.scale), layer.o, layer.o_bias)
            h = rms(x, layer.post_norm, self.eps)
            gate = F.silu(F.linear(h, layer.gate, layer.gate_bias))  # [n, I]
            x = x + F.linear(gate * F.linear(h, layer.up, layer.up_bias), layer.down, layer.down_bias)
        cache.advance(n)
        return F.linear(rms(x, self.norm, self.eps), self.lm_head, self.lm_head_bias), None  # [n, V]

    @staticmethod
    def cache_length(cache: LeanKV) -> int:
        return cache.length

    def _qkv(
        self, h: torch.Tensor, layer: _Layer, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """h [n, H] -> q [heads, n, d], k and v [kv_heads, n, d] (q and k normed (Qwen3) and rotated)."""
        if len(layer.qkv) == 1:
            qkv = F.linear(h, layer.qkv[0], layer.qkv_bias[0])
        else:
            qkv = torch.cat([F.linear(h, w, b) for w, b in zip(layer.qkv, layer.qkv_bias, strict=True)], -1)
        return split_heads(qkv, self.heads, self.kv_heads, cos, sin, layer.q_norm, layer.k_norm, self.eps)

    def probe(self) -> None:
        """LeanUnsupported when this forward's logits differ from the model's own on a short sequence:
        a prefill, a single step, a rewind and a pass of several tokens."""
        ids = torch.arange(1, PROBE_TOKENS + 1, device=self._device) % self.vocab_size
        with torch.inference_mode():
            reference = self.model(input_ids=ids[None], use_cache=False).logits[0].float()  # [8, V]
            cache = self.new_cache()
            prefill = self.forward(ids[:5], cache)
            step = self.forward(ids[5:6], cache, last_only=True)
            self.rewind(cache, 1)
            rest = self.forward(ids[5:], cache)
            ours = torch.cat([prefill, step, rest]).float()  # [9, V]
        expected = torch.cat([reference[:6], reference[5:]])
        error = (ours - expected).abs().max().item()
        scale = max(1.0, expected.abs().max().item())
        tolerance = 1e-3 if self.dtype == torch.float32 else 5e-2
        if not error <= tolerance * scale:
            raise LeanUnsupported(f"its logits differ from the model's own forward by {error:.3g} on a probe")


def _window(config: object, index: int) -> int | None:
    """Layer `index`'s sliding window, as transformers decides it (None: full attention)."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    if config.model_type == "mistral":
        return window
    types = getattr(config, "layer_types", None)
    return window if types and types[index] == "sliding_attention" else None


def _check_supported(model: nn.Module) -> None:
    config = model.config
    kind = getattr(config, "model_type", None)
    if kind not in LEAN_MODEL_TYPES:
        raise LeanUnsupported(f"architecture {kind!r} (lean steps cover {', '.join(LEAN_MODEL_TYPES)})")
    if getattr(config, "hidden_act", "silu") != "silu":
        raise LeanUnsupported(f"activation {config.hidden_act!r}")
    if getattr(model, "hf_quantizer", None) is not None:
        raise LeanUnsupported("quantized weights")
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if (rope.get("rope_type") or rope.get("type")) in LENGTH_DEPENDENT_ROPE:
        raise LeanUnsupported(f"rotary embedding {rope.get('rope_type') or rope.get('type')!r}")
    inner = getattr(model, "model", None)
    if inner is None or not all(hasattr(inner, a) for a in ("embed_tokens", "layers", "norm", "rotary_emb")):
        raise LeanUnsupported("an unexpected module layout")
    devices = {p.device for p in model.parameters()}
    if len(devices) > 1 or any(d.type == "meta" for d in devices):
        raise LeanUnsupported("weights split over several devices or offloaded")
    for module in model.modules():
        if isinstance(module, nn.Linear) and type(module) is not nn.Linear:
            raise LeanUnsupported(f"{type(module).__name__} layers")


def _qkv_bytes(layers: nn.ModuleList) -> int:
    """The bytes of every layer's q/k/v weights (what fusing them copies)."""
    return sum(
        p.numel() * p.element_size()
        for layer in layers
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj)
        for p in proj.parameters()
    )


@torch.no_grad()
def _layer(layer: nn.Module, window: int | None, fuse: bool) -> _Layer:
    """The layer's weights (the model's own tensors; q/k/v fused into one copy when `fuse`)."""
    a, m = layer.self_attn, layer.mlp
    projections = [a.q_proj, a.k_proj, a.v_proj]
    weights = [p.weight for p in projections]
    biases = [p.bias for p in projections]
    if fuse:
        bias = None
        if any(b is not None for b in biases):  # all or none: zeros stand in for a missing one
            bias = torch.cat(
                [
                    b if b is not None else w.new_zeros(w.shape[0])
                    for w, b in zip(weights, biases, strict=True)
                ]
            )
        weights, biases = [torch.cat(weights)], [bias]
    return _Layer(
        input_norm=layer.input_layernorm.weight,
        qkv=weights,
        qkv_bias=biases,
        q_norm=a.q_norm.weight if hasattr(a, "q_norm") else None,
        k_norm=a.k_norm.weight if hasattr(a, "k_norm") else None,
        o=a.o_proj.weight,
        o_bias=a.o_proj.bias,
        post_norm=layer.post_attention_layernorm.weight,
        gate=m.gate_proj.weight,
        gate_bias=m.gate_proj.bias,
        up=m.up_proj.weight,
        up_bias=m.up_proj.bias,
        down=m.down_proj.weight,
        down_bias=m.down_proj.bias,
        window=window,
    )
