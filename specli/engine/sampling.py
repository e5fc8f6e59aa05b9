"""Logits -> next-token distribution. The SAME function processes the target's p and the drafter's q.

Order and semantics follow transformers' warpers (temperature, then top-k, then top-p, then min-p, as
`GenerationMixin._get_logits_processor` appends them) so that the same settings mean the same
distribution as `model.generate(do_sample=True, ...)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class SamplingConfig:
    """temperature 0 means greedy (argmax); top_k 0, top_p 1.0 and min_p 0.0 mean "off"."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def row_argmax(logits: torch.Tensor) -> torch.Tensor:
    """argmax over the last dim, [..., V] -> [...]: the first maximum on ties and NaN as the maximum, as
    torch.argmax. Float32/64 logits on the CPU go through numpy's (0.015 ms against torch's 0.38 ms
    over a 262,144-token vocabulary: 1.6 % of a Gemma 3 step on llama.cpp)."""
    numpy_ok = logits.dtype in (torch.float32, torch.float64) and not logits.requires_grad
    if logits.device.type == "cpu" and numpy_ok:
        return torch.from_numpy(np.asarray(np.argmax(logits.numpy(), axis=-1)))
    return logits.argmax(-1)


def process_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Apply temperature, top-k, top-p, min-p to logits [..., V] and return probabilities [..., V]
    (float32). min-p drops the tokens whose probability (after the others) is below min_p times the top
    one's, as transformers' MinPLogitsWarper.

    Greedy configs (temperature 0) return the one-hot distribution of the argmax.
    """
    logits = logits.float()
    if cfg.greedy:
        return torch.nn.functional.one_hot(row_argmax(logits), logits.shape[-1]).float()
    scores = logits / cfg.temperature
    if cfg.top_k > 0:
        k = min(cfg.top_k, scores.shape[-1])
        kth = torch.topk(scores, k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, -float("inf"))
    if cfg.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1)  # ascending
        cumulative = sorted_scores.softmax(-1).cumsum(-1)
        drop_sorted = cumulative <= (1 - cfg.top_p)
        drop_sorted[..., -1] = False  # keep at least one token
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, -float("inf"))
    if cfg.min_p > 0.0:
        probs = scores.softmax(-1)
        threshold = cfg.min_p * probs.amax(-1, keepdim=True)
        scores = scores.masked_fill(probs < threshold, -float("inf"))  # the top token is never below
    return scores.softmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Draw one token id per row of probs [..., V] -> [...] (long), each id with its row's probability
    (rows need not sum to 1). On the CPU by inverse transform: one uniform per row, scaled to the row's
    total, against its cumulative sum in float64 — the first id whose cumulative sum exceeds it, so an
    id of probability 0 is never drawn (0.4 ms over a 262,144-token vocabulary where torch.multinomial
    takes 4.7: a fifth of a Gemma 3 step on llama.cpp). Elsewhere, or for a row torch would refuse
    (negative, NaN or infinite entries, nothing to draw), torch.multinomial."""
    flat = probs.reshape(-1, probs.shape[-1])  # [N, V]
    if flat.device.type != "cpu":
        return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])
    cumulative = flat.double().cumsum(-1)  # [N, V]
    total = cumulative[:, -1:].contiguous()  # [N, 1]
    if not bool(torch.isfinite(total).all()) or not bool((total > 0).all()) or bool((flat < 0).any()):
        return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])  # torch's error
    point = torch.rand(flat.shape[0], 1, generator=generator, dtype=torch.float64) * total  # [N, 1]
    ids = torch.searchsorted(cumulative, point, right=True)  # [N, 1]
    # point == total (rounding at the very top): the last id of nonzero probability
    ids = torch.where(ids >= flat.shape[-1], torch.searchsorted(cumulative, total), ids)
    return ids.reshape(probs.shape[:-1])


def sample_distinct(
    probs: torch.Tensor, n: int, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw n distinct tokens per row of probs [..., V] without replacement, in draw order -> (ids [..., n]
    long, drawn [..., n] bool: False past the row's support, where fewer than n tokens have probability).

    Gumbel-top-k: the n largest log p + Gumbel noise are distributed as n sequential draws, each from p
    with the earlier draws removed and renormalised, so draw j given draws 1..j-1 is exactly that
    distribution (what a sampled-children tree's verification divides by)."""
    uniform = torch.rand(probs.shape, generator=generator, device=probs.device, dtype=torch.float32)
    gumbel = -torch.log(-torch.log(uniform.clamp(1e-20, 1.0 - 1e-7)))
    keys = torch.where(probs > 0, probs.float().log() + gumbel, -torch.inf)  # [..., V]
    values, ids = keys.topk(min(n, probs.shape[-1]), -1)  # [..., n]
    return ids, values > -torch.inf


def choose(
    logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A drafter's step: logits [V] -> (token [1] long, q [V] it was drawn from; None when greedy, i.e.
    a deterministic choice whose q is one-hot)."""
    if cfg.greedy:
        return row_argmax(logits)[..., None], None  # [1]
    q = process_logits(logits, cfg)  # [V]
    return sample(q, generator)[None], q  # [1], [V]


def ranking_distribution(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """A drafter's distribution [..., V] for ranking token-tree nodes, whose children are its top tokens
    rather than draws: its softmax when greedy, else processed as the target's p will be, so that path
    probabilities estimate acceptance."""
    if cfg.greedy:
        return torch.softmax(logits.float(), -1)
    return process_logits(logits, cfg)


def confident(logits: torch.Tensor, p_min: float) -> bool:
    """Whether the top probability of softmax(logits [V]) is at least p_min (always, for p_min <= 0): a
    drafter's confidence in its next token, at temperature 1. One host sync when p_min > 0."""
    if p_min <= 0:
        return True
    logits = logits.float()
    top = 1.0 / torch.exp(logits - logits.max()).sum()  # max softmax without materialising it
    return bool(top >= p_min)
