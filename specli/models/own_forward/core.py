"""What specli's own drafter forwards (the lean steps, docs/design.md §13) share: a preallocated KV
cache rewound by position, rotary tables indexed by position, RMSNorm and attention without per-step objects.

One generation's keys and values live in two tensors [layers, kv_heads, capacity, head_dim]; a forward
writes its n new positions in place at `length` and advances it, a rewind only moves `length` back.
Nothing is allocated per step; the capacity doubles when a generation outgrows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

MIN_CAPACITY = 256  # positions a cache starts with; doubled as needed


def grown(length: int, capacity: int) -> int:
    """The capacity that holds `length` positions: `capacity` doubled until it does."""
    capacity = max(capacity, MIN_CAPACITY)
    while capacity < length:
        capacity *= 2
    return capacity


@dataclass
class LeanKV:
    """keys and values [layers, kv_heads, capacity, head_dim]; positions < length are the cache."""

    keys: torch.Tensor
    values: torch.Tensor
    length: int = 0

    @classmethod
    def empty(
        cls, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> LeanKV:
        shape = (layers, kv_heads, MIN_CAPACITY, head_dim)
        return cls(
            torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)
        )

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    def reserve(self, n: int) -> None:
        """Room for n more positions (a larger copy when they do not fit)."""
        need = self.length + n
        if need <= self.capacity:
            return
        size = grown(need, self.capacity)
        keys = self.keys.new_zeros((*self.keys.shape[:2], size, self.keys.shape[3]))
        values = torch.zeros_like(keys)
        keys[:, :, : self.length] = self.keys[:, :, : self.length]
        values[:, :, : self.length] = self.values[:, :, : self.length]
        self.keys, self.values = keys, values

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k, v [kv_heads, n, d] at positions length..length+n-1 of `layer` (reserved before) ->
        that layer's keys and values up to them [kv_heads, length + n, d]. `advance` commits them."""
        end = self.length + k.shape[1]
        self.keys[layer, :, self.length : end] = k
        self.values[layer, :, self.length : end] = v
        return self.keys[layer, :, :end], self.values[layer, :, :end]

    def advance(self, n: int) -> None:
        self.length += n

    def rewind(self, n: int) -> None:
        """Drop the newest n positions (their slots are overwritten by the next write)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot rewind {n} of {self.length} positions")
        self.length -= n

    def crop(self, length: int) -> None:
        """Keep the first `length` positions."""
        self.rewind(self.length - length)


class RotaryTable:
    """cos and sin [positions, head_dim] of a rotary embedding, computed once per position from the
    inverse frequencies (and attention scaling) the model's own rotary module uses; grown on demand."""

    def __init__(
        self, inv_freq: torch.Tensor, scaling: float, dtype: torch.dtype, device: torch.device
    ) -> None:
        self.inv_freq = inv_freq.to(device, torch.float32)  # [d/2]
        self.scaling = scaling
        self.dtype = dtype
        self.cos = torch.empty(0, 2 * inv_freq.shape[0], dtype=dtype, device=device)
        self.sin = self.cos

    def _extend(self, length: int) -> None:
        size = grown(length, self.cos.shape[0])
        positions = torch.arange(size, device=self.inv_freq.device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq[None]  # [P, d/2]; as transformers: float32 products
        angles = torch.cat([freqs, freqs], -1)  # [P, d]
        self.cos = (angles.cos() * self.scaling).to(self.dtype)
        self.sin = (angles.sin() * self.scaling).to(self.dtype)

    def at(self, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [n, d] of positions start..start+n-1."""
        if start + n > self.cos.shape[0]:
            self._extend(start + n)
        return self.cos[start : start + n], self.sin[start : start + n]

    def rows(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [n, d] of the given positions [n] (a token tree's: prefix length + depth)."""
        top = int(positions.max()) + 1
        if top > self.cos.shape[0]:
            self._extend(top)
        index = positions.to(self.cos.device)
        return self.cos[index], self.sin[index]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (the half-split layout of Llama) of x [heads, n, d] with cos, sin [n, d]."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def causal_mask(start: int, n: int, window: int | None, device: torch.device) -> torch.Tensor:
    """Which keys 0..start+n-1 each of n queries at positions start.. may attend [n, start + n] (bool):
    those at or before it, and (window set) fewer than `window` positions back."""
    queries = torch.arange(start, start + n, device=device)[:, None]
    keys = torch.arange(start + n, device=device)[None]
    allowed = keys <= queries
    if window is not None:
        allowed &= keys > queries - window
    return allowed


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as Llama computes it: in float32, cast back, then scaled by the weight."""
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def split_heads(
    qkv: torch.Tensor,
    heads: int,
    kv_heads: int,
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    eps: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A q/k/v projection [n, (heads + 2 kv_heads) * d] -> q [heads, n, d], k and v [kv_heads, n, d]: q
    and k normed per head when norms are given (Qwen3), then rotated together by cos, sin [n, d]."""
    n, d = qkv.shape[0], cos.shape[-1]
    qkv = qkv.view(n, heads + 2 * kv_heads, d)
    qk, v = qkv[:, : heads + kv_heads], qkv[:, heads + kv_heads :]
    if q_norm is not None:
        qk = torch.cat([rms(qk[:, :heads], q_norm, eps), rms(qk[:, heads:], k_norm, eps)], 1)
    qk = rotate(qk.transpose(0, 1), cos, sin)  # [heads + kv_heads, n, d]
    return qk[:heads], qk[heads:], v.transpose(0, 1)


def attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    start: int,
    scale: float,
    window: int | None = None,
) -> torch.Tensor:
    """Causal attention of n queries at positions start.. (q [heads, n, d]) over keys, values
    [kv_heads, start + n, d] -> [n, heads * d]; a kv head serves its group of query heads, and with a
    window a query sees the `window` newest positions up to itself."""
    heads, n, d = q.shape
    kv_heads = keys.shape[0]
    if n == 1:  # one query attends every key it is given: no mask, no kernel dispatch
        if window is not None and start + 1 > window:
            keys, values = keys[:, start + 1 - window :], values[:, start + 1 - window :]
        grouped = q.view(kv_heads, heads // kv_heads, d)  # [kv_heads, g, d]
        scores = torch.matmul(grouped, keys.transpose(1, 2)) * scale  # [kv_heads, g, T]
        weights = torch.softmax(scores.float(), -1).to(values.dtype)
        return torch.matmul(weights, values).view(1, heads * d)
    causal = start == 0 and (window is None or n <= window)  # a prefill from empty: the causal kernel
    mask = None if causal else causal_mask(start, n, window, q.device)
    out = F.scaled_dot_product_attention(
        q, keys, values, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=kv_heads != heads
    )  # [heads, n, d]
    return out.transpose(0, 1).reshape(n, heads * d)


def attend_masked(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of n queries (q [heads, n, d]) over keys, values [kv_heads, T, d], each query seeing the
    keys `visible` [n, T] (bool) allows (a token tree: the prefix and its ancestors) -> [n, heads * d]."""
    heads, n, d = q.shape
    out = F.scaled_dot_product_attention(
        q, keys, values, attn_mask=visible, scale=scale, enable_gqa=keys.shape[0] != heads
    )  # [heads, n, d]
    return out.transpose(0, 1).reshape(n, heads * d)
