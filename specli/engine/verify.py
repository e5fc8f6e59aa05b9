"""Verification as pure functions (docs/design.md §3.3): which drafts the target keeps, what it adds.

Words (docs/design.md §4): of k drafted tokens the first `accepted` are kept; at the first rejection the
target emits a *correction*; when all k are accepted it emits a *bonus* token from its (k+1)-th distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from specli.engine.sampling import SamplingConfig, process_logits, row_argmax, sample
from specli.engine.tree import ROOT, TreeRecord, children


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
    tree: a tree round's record (nodes, their status, the accepted path); None for a chain. `drafted`
        then lists the accepted path first, then the other nodes in node order (docs/design.md §14).
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
    tree: TreeRecord | None = None

    @property
    def is_bonus(self) -> bool:
        if self.tree is not None:
            return self.tree.ends_at_leaf
        return self.accepted == len(self.accept_probs)

    @property
    def committed(self) -> list[int]:
        """The tokens this verdict appends: the accepted drafts, then the correction or bonus."""
        return self.drafted[: self.accepted] + [self.token]


def verify_greedy(draft_ids: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """Greedy verification. draft_ids [k]; target_logits [k+1, V] -> keep drafts while they equal argmax."""
    k = draft_ids.shape[0]
    both = torch.cat([row_argmax(target_logits), draft_ids.to(target_logits.device)]).tolist()  # one sync
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


def without(p: torch.Tensor, tokens: Sequence[int]) -> torch.Tensor:
    """p [V] with `tokens` removed, renormalised (p itself if nothing is left): the residual of one-hot
    proposals at those tokens, refused."""
    if not tokens:
        return p
    refused = p.clone()
    refused[torch.tensor(list(tokens), device=p.device)] = 0.0
    total = refused.sum()
    return refused / total if total > 0 else p


def residual_row(p: torch.Tensor, q: torch.Tensor | None, drafted: int) -> torch.Tensor:
    """One position's residual [V] -> [V]: normalize(max(0, p - q)); q None is one-hot at `drafted` (a
    deterministic draft), whose residual is p without that token."""
    return residual_distribution(p, q) if q is not None else without(p, [drafted])


def verify_sampling(
    draft_ids: torch.Tensor,
    q: torch.Tensor | None,
    p: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    """Rejection sampling (Leviathan et al. 2022; Chen et al. 2023).

    draft_ids [k] drawn from q [k, V] (None: one-hot at each draft, a deterministic proposal); p [k+1, V]
    is the target's processed distribution at each drafted position plus one. Accept d_i with
    probability min(1, p_i(d_i)/q_i(d_i)); at the first rejection draw the correction from
    normalize(max(0, p_i - q_i)); if all k are accepted draw the bonus from p_{k+1}. The committed
    tokens are distributed exactly as the target's own samples.

    The acceptance draws come first (one host sync), then the one token the outcome needs, from its row
    alone (a second sync): a draw from each of the k+1 rows, one of them kept, would be the same
    distribution at k+1 times the work (a 17-row verify over a 262,144-token vocabulary: ~50 ms).
    """
    k = draft_ids.shape[0]
    p_d = p[:k].gather(-1, draft_ids[:, None]).squeeze(-1)  # [k]
    q_d = torch.ones_like(p_d) if q is None else q.gather(-1, draft_ids[:, None]).squeeze(-1)  # [k]
    accept_probs = acceptance_probabilities(p_d, q_d)  # [k]
    uniforms = torch.rand(k, generator=generator, device=p.device, dtype=p.dtype)  # [k]
    row = torch.cat([accept_probs, uniforms, q_d, p_d, draft_ids.to(p.dtype)]).tolist()
    drafted = [int(x) for x in row[4 * k :]]
    accept_list, uniform_list = row[:k], row[k : 2 * k]
    accepted = next((i for i in range(k) if not uniform_list[i] < accept_list[i]), k)
    outcome = p[k] if accepted == k else residual_row(p[accepted], _row(q, accepted), drafted[accepted])
    return Verdict(
        accepted=accepted,
        token=int(sample(outcome, generator)),
        drafted=drafted,
        accept_probs=accept_list,
        uniforms=uniform_list,
        draft_probs=row[2 * k : 3 * k],
        target_probs=row[3 * k : 4 * k],
    )


def _row(q: torch.Tensor | None, i: int) -> torch.Tensor | None:
    return None if q is None else q[i]


def token_distribution(verdict: Verdict, p: torch.Tensor, q: torch.Tensor | None) -> torch.Tensor:
    """The distribution verdict.token was drawn from -> [V]: the residual at the first rejection, or
    p[k] (the bonus position) after a fully accepted draft. p [k+1, V], q [k, V] (or None: one-hot) as
    in verify_sampling."""
    i = verdict.accepted
    if verdict.is_bonus:
        return p[i]
    return residual_row(p[i], _row(q, i), verdict.drafted[i])


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
        q = q.to(p.device) if q is not None else None  # [k, V]; only a drafter on another device moves it
        verdict = verify_sampling(draft_ids, q, p, generator)
        source = token_distribution(verdict, p, q) if record_top else None  # [V]
    if source is None:
        return verdict
    top = _top(source, record_top)
    if all(t != verdict.token for t, _ in top):  # the added token's own entry, even outside the top
        top.append((verdict.token, float(source[verdict.token])))
    return replace(verdict, token_source=top)


# --------------------------------------------------------------------------- token trees


def _tree_verdict(
    tokens: list[int],
    parents: Sequence[int],
    path: list[int],
    token: int,
    status: list[str],
    accept_probs: list[float],
    draft_probs: Sequence[float],
    target_probs: list[float],
    uniforms: list[float],
) -> Verdict:
    """A tree round's Verdict: per-node lists reordered path first (drafted[:accepted] is kept)."""
    on_path = set(path)
    order = path + [i for i in range(len(tokens)) if i not in on_path]

    def ordered(values: Sequence[float]) -> list[float]:
        return [values[i] for i in order] if values else []

    record = TreeRecord(
        tokens=list(tokens),
        parents=list(parents),
        draft_probs=[float(q) for q in draft_probs],
        target_probs=target_probs,
        status=status,
        path=path,
    )
    return Verdict(
        accepted=len(path),
        token=token,
        drafted=[tokens[i] for i in order],
        accept_probs=ordered(accept_probs),
        uniforms=ordered(uniforms),
        draft_probs=ordered(draft_probs),
        target_probs=ordered(target_probs),
        tree=record,
    )


def verify_tree_greedy(
    tokens: torch.Tensor,
    parents: Sequence[int],
    target_logits: torch.Tensor,
    draft_probs: Sequence[float] | None = None,
    target_probs: torch.Tensor | None = None,
) -> Verdict:
    """Greedy verification of a token tree. tokens [N] (node order), parents [N] (-1: the root),
    target_logits [N+1, V] (row 0 the root, row i + 1 node i, each computed with only its ancestors in
    view) -> the accepted path and the added token.

    Derivation: the target's greedy continuation after the prefix is argmax of row 0, then argmax of the
    row of that token, and so on. Starting at the root, a child whose token equals the argmax of its
    parent's row is exactly the target's next token, and its own row holds the target's logits after it
    (it saw the prefix and its ancestors, i.e. the committed text), so descend into it; the other
    children there are refused. At the first row none of whose children is its argmax, that argmax is
    the target's next token (the correction); at a leaf it is the bonus. Siblings carry distinct tokens,
    so at most one child matches. target_probs [N] (optional): p of each node's token at its parent.
    """
    n = tokens.shape[0]
    both = torch.cat([row_argmax(target_logits), tokens.to(target_logits.device)]).tolist()  # one sync
    argmax, toks = both[: n + 1], both[n + 1 :]
    kids = children(parents)
    status = ["unjudged"] * n
    path: list[int] = []
    row = 0
    while True:
        matched = None
        for child in kids[row]:
            if matched is None and toks[child] == argmax[row]:
                matched = child
                status[child] = "accepted"
            else:
                status[child] = "rejected"
        if matched is None:
            break
        path.append(matched)
        row = matched + 1
    accept = [1.0 if s == "accepted" else 0.0 for s in status]
    return _tree_verdict(
        toks,
        parents,
        path,
        argmax[row],
        status,
        accept,
        draft_probs if draft_probs is not None else [1.0] * n,
        target_probs.tolist() if target_probs is not None else [],
        [],
    )


def verify_tree_sampling(
    tokens: torch.Tensor,
    parents: Sequence[int],
    p: torch.Tensor,
    generator: torch.Generator | None,
    draft_probs: Sequence[float] | None = None,
) -> Verdict:
    """Lossless verification of a tree whose children were chosen deterministically (a drafter's top
    tokens, not samples). tokens [N], parents [N], p [N+1, V] the target's processed distribution at each
    row -> the accepted path and the added token.

    Rule: at a row with distribution p, try its children c_1, c_2, .. in order with p' = p: accept c_j
    with probability p'(c_j); after a rejection set p'(c_j) = 0 and renormalise; if every child is
    refused, draw the correction from the last p' (at a leaf p' = p: the bonus). Accepting descends into
    the child's row and repeats.

    Derivation (each step emits exactly one token distributed as p): with m = p(c_1) + .. + p(c_{j-1})
    the mass refused before c_j, p'(c_j) = p(c_j) / (1 - m). So P(emit c_1) = p(c_1); P(emit c_j) =
    P(c_1..c_{j-1} refused) * p(c_j) / (1 - m) = (1 - m) * p(c_j) / (1 - m) = p(c_j); and any other x is
    drawn from p restricted to the non-children, renormalised, after all were refused (probability
    1 - sum p(c)), i.e. with probability p(x). This is SpecInfer's multi-candidate rule with one-hot
    proposals (the residual of p' and a one-hot q at c is p' with c removed). Since an accepted child's
    row is the target's distribution given it, the committed run is distributed as the target's own
    samples, token by token. A sibling repeating an earlier sibling's token is refused outright (p'
    already excludes it). Every node's p and uniform cross to the host at once (one sync) before the
    walk; the correction is drawn after it, from the row the walk ended at (a second).
    """
    n = tokens.shape[0]
    device = p.device
    tokens = tokens.to(device)
    rows = torch.tensor([parent - ROOT for parent in parents], dtype=torch.long, device=device)  # [N]
    p_node = p[rows, tokens] if n else p.new_zeros(0)  # [N] p of each token at its parent's row
    uniforms = torch.rand(n, generator=generator, device=device, dtype=p.dtype)  # [N]
    host = torch.cat([p_node, uniforms, tokens.to(p.dtype)]).tolist()
    p_list, u_list = host[:n], host[n : 2 * n]
    toks = [int(x) for x in host[2 * n :]]
    kids = children(parents)
    status = ["unjudged"] * n
    accept = [0.0] * n
    path: list[int] = []
    row = 0
    while True:
        refused_mass, tried, matched = 0.0, set(), None
        for child in kids[row]:
            if toks[child] in tried:  # p' is already 0 there
                status[child] = "rejected"
                continue
            tried.add(toks[child])
            left = 1.0 - refused_mass
            accept[child] = min(1.0, p_list[child] / left) if left > 1e-12 else 1.0
            if u_list[child] < accept[child]:
                matched = child
                status[child] = "accepted"
                break
            status[child] = "rejected"
            refused_mass += p_list[child]
        if matched is None:  # the correction: from p without the children tried there (p at a leaf)
            token = int(sample(without(p[row], sorted(tried)), generator))
            break
        path.append(matched)
        row = matched + 1
    return _tree_verdict(
        toks,
        parents,
        path,
        token,
        status,
        accept,
        draft_probs if draft_probs is not None else [1.0] * n,
        p_list,
        u_list,
    )


def verify_tree_sampled(
    tokens: torch.Tensor,
    parents: Sequence[int],
    p: torch.Tensor,
    q: torch.Tensor,
    generator: torch.Generator | None,
    draft_probs: Sequence[float] | None = None,
) -> Verdict:
    """Lossless verification of a tree whose children were DRAWN: at each row, its children c_1, c_2, ..
    in draw order, without replacement, from the drafter's q at that row (`grow_sampled_tree`).
    tokens [N], parents [N], p [N+1, V] the target's processed distribution at each row, q [N+1, V] the
    distribution each row's children were drawn from -> the accepted path and the added token.

    Rule (SpecInfer's multi-candidate speculative sampling, in its without-replacement form, "recursive
    rejection sampling"): at a row start with p' = p and q' = q; try c_j: accept with probability
    min(1, p'(c_j) / q'(c_j)); after a refusal set p' = normalize(max(0, p' - q')) (p' itself if that
    is all zero through rounding) and q' = q' without c_j, renormalised; when every child is refused,
    draw the correction from the last p' (at a leaf p' = p: the bonus). Accepting descends into the
    child's row and repeats.

    Derivation. Each try is one step of rejection sampling (Leviathan et al.): a token x drawn from q'
    and kept with probability min(1, p'/q'), else a token drawn from the residual r = normalize(max(0,
    p' - q')), comes out distributed as p', whatever distribution r's token is then drawn by. Here r's
    token is drawn by the next try, whose target is r and whose proposal is q' without c_j: given the
    earlier draws, c_{j+1} is exactly a draw from that distribution (sampling without replacement), so
    the next try is again a valid step, now for r, and by induction the last row's draw from the last
    p' closes it. So every row emits one token distributed as its p; an accepted child's row holds the
    target's distribution given it, and the committed run is distributed as the target's own samples.
    (A refused c_j has p'(c_j) < q'(c_j), so r(c_j) = 0: leaving c_j out of later proposals loses
    nothing.) q' must be the distribution c_j was really drawn from; dividing by the unrenormalised q,
    or keeping p' after a refusal, biases the output (the G-tests' controls). Every row's ratios and
    uniforms are computed before the walk, child rank by rank (one host sync); the correction is drawn
    after it, from the row the walk ended at (a second).
    The record keeps each node's p' and q' at its try (`TreeRecord.tried_p` / `tried_q`) beside p and
    q given its parent (draft_probs: the drafter's, as proposed).
    """
    n = tokens.shape[0]
    device = p.device
    tokens = tokens.to(device)
    kids = children(parents)
    ratio = p.new_zeros(n)  # [N] min(1, p'/q') of each node at its try
    target_now = p.new_zeros(n)  # [N] p'(c) at its try
    draft_now = p.new_zeros(n)  # [N] q'(c) at its try
    p_row, q_row = p.clone(), q.to(device=device, dtype=p.dtype).clone()  # [N+1, V] p', q' per row
    for rank in range(max((len(k) for k in kids), default=0)):
        rows = [row for row, kid in enumerate(kids) if len(kid) > rank]
        nodes = torch.tensor([kids[row][rank] for row in rows], device=device)
        at = torch.tensor(rows, device=device)
        c = tokens[nodes]
        p_c, q_c = p_row[at, c], q_row[at, c]
        ratio[nodes], target_now[nodes], draft_now[nodes] = acceptance_probabilities(p_c, q_c), p_c, q_c
        p_row[at] = residual_distribution(p_row[at], q_row[at])  # what a refusal leaves
        q_rest = q_row[at].index_put((torch.arange(len(rows), device=device), c), p.new_zeros(len(rows)))
        total = q_rest.sum(-1, keepdim=True)
        q_row[at] = q_rest / total.clamp_min(torch.finfo(p.dtype).tiny)
    uniforms = torch.rand(n, generator=generator, device=device, dtype=p.dtype)  # [N]
    p_node = p[torch.tensor([parent - ROOT for parent in parents], device=device), tokens] if n else ratio
    host = torch.cat([ratio, uniforms, tokens.to(p.dtype), target_now, draft_now, p_node]).tolist()
    accept, u_list = host[:n], host[n : 2 * n]
    toks = [int(x) for x in host[2 * n : 3 * n]]
    status = ["unjudged"] * n
    path: list[int] = []
    row = 0
    while True:
        matched = None
        for child in kids[row]:
            if u_list[child] < accept[child]:
                matched = child
                status[child] = "accepted"
                break
            status[child] = "rejected"
        if matched is None:  # the correction: from this row's p' once every child was refused
            token = int(sample(p_row[row], generator))
            break
        path.append(matched)
        row = matched + 1
    verdict = _tree_verdict(
        toks,
        parents,
        path,
        token,
        status,
        accept,
        draft_probs if draft_probs is not None else host[4 * n : 5 * n],
        host[5 * n :],
        u_list,
    )
    assert verdict.tree is not None
    tried = replace(verdict.tree, tried_p=host[3 * n : 4 * n], tried_q=host[4 * n : 5 * n])
    return replace(verdict, tree=tried)


def tree_token_distribution(verdict: Verdict, p: torch.Tensor, q: torch.Tensor | None = None) -> torch.Tensor:
    """The distribution a tree verdict's token was drawn from -> [V]: the last row's p after every child
    tried there was refused (p itself at a leaf). Children chosen deterministically (q None): p without
    them, renormalised; children drawn from q [N+1, V]: the residuals of verify_tree_sampled, child by
    child. p [N+1, V] as in verify_tree_sampling."""
    tree = verdict.tree
    assert tree is not None
    row = tree.path[-1] + 1 if tree.path else 0
    tried = [tree.tokens[i] for i, parent in enumerate(tree.parents) if parent + 1 == row]
    if q is not None:
        dist, q_now = p[row], q[row].to(p)
        for token in tried:
            dist = residual_distribution(dist, q_now)
            q_now = q_now.clone()
            q_now[token] = 0.0
            q_now = q_now / q_now.sum().clamp_min(torch.finfo(p.dtype).tiny)
        return dist
    return without(p[row], tried)


def verify_tree(
    tokens: torch.Tensor,
    parents: Sequence[int],
    logits: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    draft_probs: Sequence[float] | None = None,
    record_top: int = 0,
    q: torch.Tensor | None = None,
) -> Verdict:
    """One tree round's verification: the target's logits [N+1, V] (row 0 the root) judge tokens [N]
    under parents [N]. Greedy settings follow the argmax (verify_tree_greedy); sampling, the
    renormalising rule for children chosen deterministically (verify_tree_sampling, q None) or the
    multi-candidate rule for children drawn from q [N+1, V] (verify_tree_sampled), with p processed as
    the chain's. record_top > 0 fills `Verdict.token_source` as `verify` does, and (greedy) each node's
    target probability."""
    if sampling.greedy:
        probs = logits.float().softmax(-1) if record_top else None  # [N+1, V]
        node_p = None
        if probs is not None and tokens.shape[0]:
            rows = torch.tensor([parent - ROOT for parent in parents], device=probs.device)
            node_p = probs[rows, tokens.to(probs.device)]  # [N]
        verdict = verify_tree_greedy(tokens, parents, logits, draft_probs, node_p)
        if probs is None:
            return verdict
        row = verdict.tree.path[-1] + 1 if verdict.tree and verdict.tree.path else 0
        source = probs[row]
    else:
        p = process_logits(logits, sampling)  # [N+1, V]
        if q is not None:
            verdict = verify_tree_sampled(tokens, parents, p, q, generator, draft_probs)
        else:
            verdict = verify_tree_sampling(tokens, parents, p, generator, draft_probs)
        if not record_top:
            return verdict
        source = tree_token_distribution(verdict, p, q)
    top = _top(source, record_top)
    if all(t != verdict.token for t, _ in top):
        top.append((verdict.token, float(source[verdict.token])))
    return replace(verdict, token_source=top)
