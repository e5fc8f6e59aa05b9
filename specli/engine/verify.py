"""Verification as pure functions (docs/design.md §3.3): which drafts the target keeps, what it adds.

Words (docs/design.md §4): of k drafted tokens the first `accepted` are kept; at the first rejection the
target emits a *correction*; when all k are accepted it emits a *bonus* token from its (k+1)-th distribution.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from specli.engine.sampling import SamplingConfig, process_logits, sample


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one round's draft.

    drafted: the k drafted ids, on the host.
    accepted: number of leading draft tokens kept (0..k).
    token: the correction (accepted < k) or bonus (accepted == k) token id.
    accept_probs: min(1, p/q) per drafted token (greedy: 1.0 or 0.0), length k.
    uniforms: the uniform draws u compared with accept_probs (greedy: empty).
    draft_probs / target_probs: q_i(d_i) and p_i(d_i) per drafted token (greedy: q is 1.0 -- the draft
        was chosen deterministically -- and target_probs is empty).
    target_argmax: the target's argmax at each of the k+1 positions (greedy only; sampling: empty).
    token_source: top (id, probability) entries of the distribution `token` came from (when recorded).
    """

    accepted: int
    token: int
    drafted: list[int]
    accept_probs: list[float]
    uniforms: list[float]
    draft_probs: list[float] = field(default_factory=list)
    target_probs: list[float] = field(default_factory=list)
    target_argmax: list[int] = field(default_factory=list)
    token_source: list[tuple[int, float]] = field(default_factory=list)

    @property
    def is_bonus(self) -> bool:
        return self.accepted == len(self.accept_probs)

    @property
    def committed(self) -> list[int]:
        """The tokens this verdict appends: the accepted drafts, then the correction or bonus."""
        return self.drafted[: self.accepted] + [self.token]


def verify_greedy(draft_ids: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """Greedy verification. draft_ids [k]; target_logits [k+1, V] -> keep drafts while they equal argmax."""
    k = draft_ids.shape[0]
    both = torch.cat([target_logits.argmax(-1), draft_ids.to(target_logits.device)]).tolist()  # one sync
    target_ids, drafted = both[: k + 1], both[k + 1 :]
    matches = [d == t for d, t in zip(drafted, target_ids[:k], strict=True)]
    accepted = next((i for i, ok in enumerate(matches) if not ok), k)
    return Verdict(
        accepted=accepted,
        token=target_ids[accepted],
        drafted=drafted,
        accept_probs=[1.0 if ok else 0.0 for ok in matches],
        uniforms=[],
        draft_probs=[1.0] * k,
        target_argmax=target_ids,
    )


def acceptance_probabilities(p_d: torch.Tensor, q_d: torch.Tensor) -> torch.Tensor:
    """min(1, p(d) / q(d)) elementwise for the probabilities of the drafted tokens [k] -> [k].

    q(d) is positive for any token actually drawn from q; a zero is treated as "accept iff p(d) > 0".
    """
    ratio = torch.where(q_d > 0, p_d / q_d.clamp_min(torch.finfo(q_d.dtype).tiny), (p_d > 0).to(p_d.dtype))
    return ratio.clamp(max=1.0)


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p - q)) over the last dim; falls back to p where the residual is all zero."""
    residual = (p - q).clamp_min(0)
    total = residual.sum(-1, keepdim=True)
    return torch.where(total > 0, residual / total.clamp_min(torch.finfo(p.dtype).tiny), p)


def verify_sampling(
    draft_ids: torch.Tensor,
    q: torch.Tensor,
    p: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    """Rejection sampling (Leviathan et al. 2022; Chen et al. 2023).

    draft_ids [k] drawn from q [k, V]; p [k+1, V] is the target's processed distribution at each drafted
    position plus one. Accept d_i with probability min(1, p_i(d_i)/q_i(d_i)); at the first rejection draw
    the correction from normalize(max(0, p_i - q_i)); if all k are accepted draw the bonus from p_{k+1}.
    The committed tokens are distributed exactly as the target's own samples.
    """
    k = draft_ids.shape[0]
    p_d = p[:k].gather(-1, draft_ids[:, None]).squeeze(-1)  # [k]
    q_d = q.gather(-1, draft_ids[:, None]).squeeze(-1)  # [k]
    accept_probs = acceptance_probabilities(p_d, q_d)  # [k]
    uniforms = torch.rand(k, generator=generator, device=p.device, dtype=p.dtype)  # [k]
    # One candidate per outcome, drawn together so the round needs a single host sync:
    # row i < k is the correction if d_i is the first rejection, row k is the bonus.
    outcomes = torch.cat([residual_distribution(p[:k], q), p[k:]])  # [k+1, V]
    candidates = sample(outcomes, generator)  # [k+1]
    row = torch.cat(
        [accept_probs, uniforms, q_d, p_d, candidates.to(p.dtype), draft_ids.to(p.dtype)]
    ).tolist()
    accept_list, uniform_list = row[:k], row[k : 2 * k]
    accepted = next((i for i in range(k) if not uniform_list[i] < accept_list[i]), k)
    return Verdict(
        accepted=accepted,
        token=int(row[4 * k + accepted]),
        drafted=[int(x) for x in row[5 * k + 1 :]],
        accept_probs=accept_list,
        uniforms=uniform_list,
        draft_probs=row[2 * k : 3 * k],
        target_probs=row[3 * k : 4 * k],
    )


def token_distribution(verdict: Verdict, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The distribution verdict.token was drawn from -> [V]: the residual at the first rejection, or
    p[k] (the bonus position) after a fully accepted draft. p [k+1, V], q [k, V] as in verify_sampling."""
    i = verdict.accepted
    if verdict.is_bonus:
        return p[i]
    return residual_distribution(p[i], q[i])


def _top(dist: torch.Tensor, n: int) -> list[tuple[int, float]]:
    """The n most likely (id, probability) entries of dist [V] with probability > 0."""
    values, ids = dist.topk(min(n, dist.shape[-1]))
    return [(int(i), float(v)) for v, i in zip(values.tolist(), ids.tolist(), strict=True) if v > 0]


def verify(
    draft_ids: torch.Tensor,
    logits: torch.Tensor,
    q: torch.Tensor | None,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    record_top: int = 0,
) -> Verdict:
    """One round's verification: the target's logits [k+1, V] judge draft_ids [k].

    q [k, V] is the distribution each draft was drawn from; None means a deterministic proposal (one-hot
    q at each id). Greedy settings verify by argmax, otherwise by rejection sampling with p processed
    exactly as the drafter's q was. record_top > 0 fills `Verdict.token_source` with that many entries of
    the distribution `token` came from (greedy: the target's softmax there), then `token`'s own entry
    when it is not among them (the views show its probability).
    """
    if sampling.greedy:
        verdict = verify_greedy(draft_ids, logits)
        source = logits[verdict.accepted].float().softmax(-1) if record_top else None  # [V]
    else:
        p = process_logits(logits, sampling)  # [k+1, V]
        if q is None:
            q = torch.nn.functional.one_hot(draft_ids, p.shape[-1]).to(p.dtype)  # [k, V]
        q = q.to(p.device)  # [k, V]; only a drafter on another device moves it
        verdict = verify_sampling(draft_ids, q, p, generator)
        source = token_distribution(verdict, p, q) if record_top else None  # [V]
    if source is None:
        return verdict
    top = _top(source, record_top)
    if all(t != verdict.token for t, _ in top):  # the added token's own entry, even outside the top
        top.append((verdict.token, float(source[verdict.token])))
    return replace(verdict, token_source=top)
