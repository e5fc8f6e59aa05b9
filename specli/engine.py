"""The speculative loop (GUIDE §3). Yields one `Round` per target forward; never prints.

Target cache invariant: it holds every committed token except the last one (`pending`). A round runs
ONE target forward over [pending, d_1..d_k] -> logits for k+1 positions, verifies, commits
d_1..d_accepted + (correction | bonus), and rewinds the k - accepted rejected positions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter

import torch

from specli.cached_lm import CachedLM
from specli.drafters.base import Drafter, Proposal, SharesTargetCache
from specli.events import Round, StopReason, TokenKind
from specli.sampling import SamplingConfig, process_logits
from specli.stopping import StopCriteria
from specli.verify import token_distribution, verify_greedy, verify_sampling


@dataclass(frozen=True)
class EngineConfig:
    """max_new_tokens >= 1; num_draft_tokens k >= 1 (ignored without a drafter); record_top > 0 fills
    each Round's token_source with that many entries (one more host sync per round, for views)."""

    max_new_tokens: int
    num_draft_tokens: int = 4
    sampling: SamplingConfig = SamplingConfig()
    seed: int | None = None
    record_top: int = 0


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _one_hot(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(ids, vocab).float()  # [k, V]


def _top(dist: torch.Tensor | None, n: int) -> list[tuple[int, float]]:
    """The n most likely (id, probability) entries of dist [V] that have probability > 0."""
    if dist is None or n <= 0:
        return []
    values, ids = dist.topk(min(n, dist.shape[-1]))
    return [(int(i), float(v)) for v, i in zip(values.tolist(), ids.tolist(), strict=True) if v > 0]


def generate_rounds(
    target: CachedLM,
    drafter: Drafter | None,
    prompt_ids: list[int],
    config: EngineConfig,
    stop: StopCriteria,
    max_positions: int | None = None,
) -> Iterator[Round]:
    """Speculative generation after prompt_ids; `drafter=None` is plain decoding (one token a round).

    Output is the target's own: greedy token for token, sampling in distribution. Stops at EOS, stop
    strings, max_new_tokens (never overshoots) and before max_positions (the context limit).
    """
    if not prompt_ids:
        raise ValueError("prompt_ids must hold at least one token")
    device = target.output_device  # verification and sampling happen where the logits are
    generator = draft_generator = None
    if config.seed is not None:
        generator = draft_generator = torch.Generator(device=device).manual_seed(config.seed)
        draft_device = getattr(drafter, "device", device)
        if draft_device != device:  # a drafter on another device samples with its own generator
            draft_generator = torch.Generator(device=draft_device).manual_seed(config.seed + 1)
    sampling = config.sampling
    start = perf_counter()
    cache = target.new_cache()
    if len(prompt_ids) > 1:  # prefill; the LM head runs for one position only
        target.forward(torch.tensor(prompt_ids[:-1]), cache, last_only=True)
        target.settle(cache)
    shared = drafter if isinstance(drafter, SharesTargetCache) else None
    if drafter is not None:
        drafter.reset(prompt_ids)
    if shared is not None:
        shared.attach(cache)
    pending = prompt_ids[-1]
    generated: list[int] = []
    context_limit = max_positions if max_positions is not None else 1 << 62

    for index in range(config.max_new_tokens):
        new_budget = config.max_new_tokens - len(generated)
        context_budget = context_limit - (len(prompt_ids) + len(generated))
        budget = min(new_budget, context_budget)
        if budget <= 0:
            return
        k = min(config.num_draft_tokens, budget - 1) if drafter is not None else 0

        t0 = perf_counter()
        if k > 0:
            proposal = drafter.propose(k, sampling, draft_generator)
        else:
            proposal = Proposal(torch.empty(0, dtype=torch.long))
        # Only token ids cross devices (q too if the drafter is not beside the LM head; placement avoids it).
        draft_ids = proposal.ids.to(device)  # [k]
        k = draft_ids.shape[0]
        _synchronize(device)
        t1 = perf_counter()

        ids = torch.cat([torch.tensor([pending], device=device), draft_ids])  # [k+1]
        if shared is not None and k > 0:
            logits = shared.verify_forward(ids, cache)  # [k+1, V], reusing the draft's work
        else:
            logits = target.forward(ids, cache)  # [k+1, V]
        if sampling.greedy:
            verdict = verify_greedy(draft_ids, logits)
            source = logits[verdict.accepted].float().softmax(-1) if config.record_top else None  # [V]
        else:
            p = process_logits(logits, sampling)  # [k+1, V]
            q = (
                proposal.q.to(device) if proposal.q is not None else _one_hot(draft_ids, p.shape[-1])
            )  # [k, V]
            verdict = verify_sampling(draft_ids, q, p, generator)
            source = token_distribution(verdict, p, q) if config.record_top else None  # [V]
        target.rewind(cache, k - verdict.accepted)
        if drafter is not None:
            drafter.commit(verdict.accepted, verdict.token)
        t2 = perf_counter()

        committed = verdict.drafted[: verdict.accepted] + [verdict.token]
        reason = None
        cut = stop.cut(generated, committed)
        if cut is not None:
            committed, reason = committed[: cut[0]], cut[1]
        generated += committed
        pending = verdict.token
        if reason is None and len(generated) >= config.max_new_tokens:
            reason = StopReason.MAX_NEW_TOKENS
        elif reason is None and len(prompt_ids) + len(generated) >= context_limit:
            reason = StopReason.CONTEXT
        yield Round(
            index=index,
            drafted=verdict.drafted,
            draft_probs=verdict.draft_probs if not sampling.greedy else [1.0] * k,
            target_probs=verdict.target_probs,
            target_argmax=verdict.target_argmax,
            accept_probs=verdict.accept_probs,
            uniforms=verdict.uniforms,
            accepted=verdict.accepted,
            token=verdict.token,
            kind=TokenKind.BONUS if verdict.is_bonus else TokenKind.CORRECTION,
            committed=committed,
            draft_time=t1 - t0,
            verify_time=t2 - t1,
            elapsed=perf_counter() - start,
            stop=reason,
            info=proposal.info,
            token_source=_top(source, config.record_top),
        )
        if reason is not None:
            return
