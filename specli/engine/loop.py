"""The speculative loop (docs/design.md §3). Yields one `Round` per target forward; never prints.

Target cache invariant: it holds every committed token except the last one (`pending`). A round runs
ONE target forward over [pending, d_1..d_k] -> logits for k+1 positions, verifies, commits
d_1..d_accepted + (correction | bonus), and rewinds the k - accepted rejected positions.

The prompt's forward carries the first round where the target can (`merges_prefill`: the torch engine)
and the drafter drafts without it (no target features, not inside the target's cache): that round runs
ONE forward over [prompt..., d_1..d_k] on an empty cache, the LM head on its last k+1 positions only, as
transformers' prompt lookup does; a plain generation's first forward is the whole prompt, as generate()'s.
It reports that forward as prefill_time (its verify_time is 0) and teaches the cost model no verify time.
A first round that drafts a tree prefills the prompt on its own first.

Each round's k is chosen by `DraftLength` (docs/design.md §11) up to num_draft_tokens, unless fixed_k;
the drafter may propose fewer (its confidence threshold, the end of a lookup match).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch

from specli.engine.draft_length import DraftLength
from specli.engine.drafter import Drafter, Proposal
from specli.engine.events import Round, StopReason
from specli.engine.model import TargetModel
from specli.engine.sampling import SamplingConfig
from specli.engine.stopping import StopCriteria
from specli.engine.tree import ancestor_mask, depths, subtree
from specli.engine.verify import Verdict, verify, verify_tree

TargetForward = Callable[..., torch.Tensor]  # (ids [n], cache, last_only=False) -> logits [n|1, V]


@dataclass(frozen=True)
class EngineConfig:
    """max_new_tokens >= 1; num_draft_tokens k >= 1, the most a round drafts (ignored without a drafter);
    fixed_k: every round drafts k (else each round chooses up to k); record_top > 0 fills each Round's
    token_source with that many entries (one more host sync per round, for views)."""

    max_new_tokens: int
    num_draft_tokens: int = 4
    fixed_k: bool = False
    sampling: SamplingConfig = SamplingConfig()
    seed: int | None = None
    record_top: int = 0


def generate_rounds(
    target: TargetModel,
    drafter: Drafter | None,
    prompt_ids: list[int],
    config: EngineConfig,
    stop: StopCriteria,
    max_positions: int | None = None,
    length: DraftLength | None = None,
) -> Iterator[Round]:
    """Speculative generation after prompt_ids; `drafter=None` is plain decoding (one token a round).

    Output is the target's own: greedy token for token, sampling in distribution. Stops at EOS, stop
    strings, max_new_tokens (never overshoots) and before max_positions (the context limit). `length`:
    the drafter's `DraftLength` as earlier generations left it (acceptance, costs, tree against chain
    rounds; updated in place, so a pair pays the warm-up once), else a new one (`new_draft_length`).
    """
    if not prompt_ids:
        raise ValueError("prompt_ids must hold at least one token")
    device = target.output_device  # verification and sampling happen where the logits are
    generator, draft_generator = _generators(config.seed, device, drafter)
    forward = _target_forward(target, drafter)
    if drafter is None:
        length = None
    else:  # before this generation's cache exists (new_draft_length may time forwards)
        length = length if length is not None else new_draft_length(target, drafter, config)
        length.begin()
    start = perf_counter()
    waiting = prompt_ids[:-1] if _merges_prefill(target, drafter) else []  # the first round runs them
    cache = _prefill(target, drafter, prompt_ids, forward, run=not waiting)
    target.synchronize()
    prefill_time = perf_counter() - start  # reported with the first round
    pending, generated = prompt_ids[-1], []
    limit = min(config.max_new_tokens, (max_positions or 1 << 62) - len(prompt_ids))

    for index in range(config.max_new_tokens):
        budget = limit - len(generated)  # tokens this generation may still commit
        if budget <= 0:
            return
        state = drafter.draft_state if drafter is not None else None  # acceptance is estimated per state
        if length is None:
            k, why = 0, ""
        else:  # a draft riding in the prompt's forward costs only its row there
            k, why = length.choose_with_prompt(budget, state) if waiting else length.choose(budget, state)

        tree, shape = _tree_round(drafter, length, k, budget, state, config)
        if waiting and (tree or shape is not None):  # a tree's masked forward follows the prompt's own
            t = perf_counter()
            _run_prompt(target, waiting, cache, forward)
            target.synchronize()
            prefill_time, waiting = prefill_time + perf_counter() - t, []
        t0 = perf_counter()  # draft
        if shape is not None:  # drawn children in the shape the cost model chose (docs/design.md §14)
            proposal = drafter.propose(
                max(depths(shape)), config.sampling, draft_generator, nodes=len(shape), shape=shape
            )
        elif tree:  # a token tree of depth <= k this round
            proposal = drafter.propose(k, config.sampling, draft_generator, nodes=drafter.tree_size)
        else:
            proposal = drafter.propose(k, config.sampling, draft_generator) if k > 0 else Proposal.empty()
        draft_ids = proposal.ids.to(device)  # [k] (a tree: [N]); only token ids (and q) cross devices
        target.synchronize()
        t1 = perf_counter()  # verify: one target forward over [pending, d_1..d_k]
        merged = bool(waiting) and not proposal.is_tree  # this round's forward is the prompt's too
        if proposal.is_tree and drafter is not None and length is not None:
            nodes = (  # drawn children are verified whole: pruning by their tokens would bias them
                length.choose_nodes(proposal.parents, proposal.probs, t1 - t0)
                if proposal.q is None
                else list(range(len(proposal.parents)))
            )
            verdict = _verify_tree(target, drafter, proposal, nodes, pending, cache, config, generator)
            depth = verdict.tree.depth if verdict.tree is not None else 0
        else:
            ids = torch.cat([torch.tensor([pending], device=device), draft_ids])  # [k+1]
            if waiting:  # the prompt's forward verifies this round's drafts too: logits of its last k+1
                logits = target.forward(
                    torch.cat([torch.tensor(waiting, device=device), ids]), cache, keep=len(ids)
                )
            else:
                logits = forward(ids, cache)  # [k+1, V]
            verdict = verify(draft_ids, logits, proposal.q, config.sampling, generator, config.record_top)
            target.rewind(cache, len(verdict.drafted) - verdict.accepted)  # drop the rejected positions
            if drafter is not None:
                drafter.commit(verdict.accepted, verdict.token)
            depth = len(verdict.drafted)
        t2 = perf_counter()
        verify_time = 0.0 if merged else t2 - t1
        if merged:
            prefill_time, waiting = prefill_time + t2 - t1, []
        if length is not None:
            length.observe(
                depth,
                verdict.accepted,
                t1 - t0,
                verify_time,
                state,
                verified=len(verdict.drafted) + 1,
                tree=verdict.tree,
                accept_probs=verdict.accept_probs if verdict.tree is None else None,
                timed=not merged,
            )
            if verdict.tree is not None:
                length.observe_tree(verdict.tree)
            if drafter.tree_size and verdict.drafted:
                length.observe_round(verdict.tree is not None, len(verdict.committed), t2 - t0)

        committed, reason = stop.commit(generated, verdict.committed)  # cut at EOS / a stop string
        generated += committed
        pending = verdict.token
        if reason is None and len(generated) >= limit:
            reason = (
                StopReason.MAX_NEW_TOKENS if len(generated) >= config.max_new_tokens else StopReason.CONTEXT
            )
        yield Round.from_verdict(
            verdict,
            index=index,
            committed=committed,
            draft_time=t1 - t0,
            verify_time=verify_time,
            elapsed=perf_counter() - start,
            stop=reason,
            info=proposal.info,
            prefill_time=prefill_time if index == 0 else 0.0,
            draft_limit=k,
            draft_reason=proposal.cut if proposal.cut and len(verdict.drafted) < k else why,
        )
        if reason is not None:
            return


def new_draft_length(target: TargetModel, drafter: Drafter, config: EngineConfig) -> DraftLength:
    """A fresh `DraftLength` for `drafter` on `target` under `config`: its priors are the drafter's
    (parallel, model-free, per-state acceptance) and, as the verify cost, forwards of n tokens that the
    target timed once (llama.cpp; the torch engine measures none: None)."""
    prior = target.verify_costs() if not config.fixed_k else None
    return DraftLength(
        config.num_draft_tokens,
        config.fixed_k,
        drafter.parallel,
        verify_prior=prior,
        skip=drafter.model_free,
        state_priors=drafter.state_priors,
    )


def _tree_round(
    drafter: Drafter | None,
    length: DraftLength | None,
    k: int,
    budget: int,
    state: str | None,
    config: EngineConfig,
) -> tuple[bool, list[int] | None]:
    """Whether this round drafts a tree, and the shape of its drawn children (docs/design.md §14): a
    drafter whose children are drawn under sampling gets the shape the cost model chooses from past
    rounds (None: the chain pays as much), unless --fixed-k grows the full tree; otherwise the measured
    choice between tree and chain rounds (`DraftLength.use_tree`)."""
    if k < 1 or drafter is None or length is None or drafter.tree_size < 1:
        return False, None
    if drafter.tree_draws and not config.sampling.greedy and not length.fixed:
        shape = length.choose_shape(k, budget, drafter.tree_width, drafter.tree_size, state)
        return shape is not None, shape
    return length.use_tree(), None


def _verify_tree(
    target: TargetModel,
    drafter: Drafter,
    proposal: Proposal,
    nodes: list[int],
    pending: int,
    cache: Any,
    config: EngineConfig,
    generator: torch.Generator | None,
) -> Verdict:
    """A tree round's verify (docs/design.md §14): ONE masked target forward over [pending, the chosen
    `nodes` of the proposal] (each sees the prefix and its ancestors, at position prefix + depth), the
    tree verification, the cache compacted to the accepted path, the drafter told the path (in the
    proposal's node numbers). Returns the verdict, its tree renumbered over `nodes`."""
    device = target.output_device
    parents = subtree(proposal.parents, nodes)  # [N] over the chosen nodes
    ids = proposal.ids[nodes].to(device)  # [N]
    q = proposal.q  # [N+1, V] | None: a tree of drawn children is verified whole (nodes is every node)
    if q is not None and len(nodes) < len(proposal.parents):
        raise ValueError("a tree of drawn children cannot be pruned: its draws would no longer be q's")
    probs = [proposal.probs[i] for i in nodes] if proposal.probs is not None else None
    length = target.cache_length(cache)
    n = len(nodes) + 1
    positions = torch.tensor([length] + [length + d for d in depths(parents)])  # [N+1]
    visible = torch.cat([torch.ones(n, length, dtype=torch.bool), ancestor_mask(parents)], 1)  # [N+1, L+N+1]
    logits, features = target.forward_masked(
        torch.cat([torch.tensor([pending], device=device), ids]),
        cache,
        positions,
        visible,
        drafter.feature_layers,
    )  # [N+1, V], [N+1, F] | None
    verdict = verify_tree(ids, parents, logits, config.sampling, generator, probs, config.record_top, q)
    path = verdict.tree.path if verdict.tree is not None else []
    rows = [0] + [i + 1 for i in path]  # the root and the accepted path
    if features is not None:
        drafter.observe_features(features[rows])  # [1 + accepted, F]
    target.keep(cache, n, rows)
    drafter.commit_tree([nodes[i] for i in path], verdict.token)
    return verdict


def _generators(
    seed: int | None, device: torch.device, drafter: Drafter | None
) -> tuple[torch.Generator | None, torch.Generator | None]:
    """(verifier's, drafter's) generators: one seeded stream on one device; a drafter that samples on a
    device of its own gets its own generator there (seed + 1)."""
    if seed is None:
        return None, None
    generator = torch.Generator(device=device).manual_seed(seed)
    draft_device = drafter.device if drafter is not None and drafter.device is not None else device
    if draft_device == device:
        return generator, generator
    return generator, torch.Generator(device=draft_device).manual_seed(seed + 1)


def _target_forward(target: TargetModel, drafter: Drafter | None) -> TargetForward:
    """The target forward every step runs, chosen once: plain; computed inside a drafter that shares the
    target's cache (self); or plain plus the hidden states a feature-reading drafter (EAGLE) observes."""
    if drafter is None:
        return target.forward
    if drafter.feature_layers:
        layers = tuple(drafter.feature_layers)

        def forward_with_features(ids: torch.Tensor, cache: Any, last_only: bool = False) -> torch.Tensor:
            logits, features = target.forward_features(ids, cache, layers, last_only=last_only)
            drafter.observe_features(features)  # [n, F]: every position this forward ran
            return logits

        return forward_with_features
    if drafter.shares_target_cache:

        def forward_shared(ids: torch.Tensor, cache: Any, last_only: bool = False) -> torch.Tensor:
            if last_only:  # the prefill
                return target.forward(ids, cache, last_only=last_only)
            return drafter.verify_forward(ids, cache)  # reuses whatever the draft computed

        return forward_shared
    return target.forward


def _merges_prefill(target: TargetModel, drafter: Drafter | None) -> bool:
    """Whether the first round's forward may carry the prompt (module docstring): the target can
    (`merges_prefill`) and the drafter drafts without the target's forward of the prompt."""
    if not getattr(target, "merges_prefill", False):
        return False
    return drafter is None or not (drafter.feature_layers or drafter.shares_target_cache)


def _prefill(
    target: TargetModel, drafter: Drafter | None, prompt_ids: list[int], forward: TargetForward, run: bool
) -> Any:
    """A fresh target cache holding prompt_ids but the last token (run False: empty, the first round
    runs them); the drafter reset (and attached)."""
    if drafter is not None:
        drafter.reset(prompt_ids)
    cache = target.new_cache()
    if run and len(prompt_ids) > 1:
        _run_prompt(target, prompt_ids[:-1], cache, forward)
    if drafter is not None and drafter.shares_target_cache:
        drafter.attach(cache)
    return cache


def _run_prompt(target: TargetModel, ids: list[int], cache: Any, forward: TargetForward) -> None:
    """The prompt's tokens into `cache`, the LM head run for one position only; sliding layers trimmed."""
    forward(torch.tensor(ids), cache, last_only=True)
    target.settle(cache)
