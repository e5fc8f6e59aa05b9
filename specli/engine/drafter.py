"""The drafter protocol the engine calls (docs/design.md §7): the `Drafter` base class every strategy's
drafter in `specli.drafters` subclasses, one file each.

The engine owns the target; a drafter owns whatever it needs to propose tokens (a model and its cache,
an n-gram index, ...). Per generation the engine calls `reset(prompt_ids)`; per round `propose(k)` and
then `commit(accepted, token)`. What else a drafter can do it declares in plain attributes, with their
defaults on `Drafter`, and the engine and the pair read them directly -- one way, never isinstance or
getattr: `device`, `parallel`, `draft_state`, and the two that change which target forward the engine
runs (chosen once per generation; the loop has no special cases): `shares_target_cache` (the drafter
computes the verify forward inside the target's cache: self) and `feature_layers` (the drafter reads the
target's hidden states from every target forward: EAGLE).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from specli.engine.sampling import SamplingConfig, choose, confident


@dataclass
class Proposal:
    """ids [k] (long, any device); q [k, V_target] the distributions they were drawn from, or None for
    a deterministic proposal (q is one-hot at each id). k may be smaller than asked, even 0; `cut` then
    says why ("threshold": the drafter's confidence fell below draft_p_min; "match": a lookup match
    ended; "context": the drafter's context is full). A "threshold" cut also puts into info the token
    the drafter was most sure of there (`cut_token`), its probability (`cut_prob`: the softmax at
    temperature 1, which the threshold is compared with) and the threshold (`p_min`)."""

    ids: torch.Tensor
    q: torch.Tensor | None = None
    info: dict[str, Any] = field(default_factory=dict)
    cut: str | None = None
    parents: list[int] | None = None
    probs: list[float] | None = None

    @property
    def is_tree(self) -> bool:
        """A token tree (docs/design.md §14): ids [N] in node order, `parents` [N] (-1: the pending
        token), `probs` [N] each token's probability under the drafter given its parent; siblings
        distinct. Children chosen deterministically (the drafter's top tokens, most likely first): q is
        None. Children DRAWN without replacement from the drafter's distributions (sampling; SpecInfer's
        form): q [N+1, V] holds them, row 0 the pending token's and row i + 1 node i's, each row's
        children in draw order; such a tree is verified whole (no node may be dropped by its token)."""
        return self.parents is not None

    @classmethod
    def empty(cls) -> Proposal:
        """No draft tokens (a plain decoding step)."""
        return cls(torch.empty(0, dtype=torch.long))


@dataclass
class Drafts:
    """A proposal built one draft at a time by a model drafter: `take(logits)` draws the next token (and
    keeps the q it was drawn from), or ends the draft when the drafter's top probability is below p_min
    (cut = "threshold", and `cut_info` says which token fell short, by how much)."""

    sampling: SamplingConfig
    generator: torch.Generator | None
    p_min: float = 0.0
    cut: str | None = None
    ids: list[torch.Tensor] = field(default_factory=list)
    qs: list[torch.Tensor] = field(default_factory=list)
    cut_info: dict[str, Any] = field(default_factory=dict)

    def take(self, logits: torch.Tensor) -> torch.Tensor | None:
        """logits [V_target] -> the drafted token [1], or None when the draft ends here."""
        if not confident(logits, self.p_min):
            top, token = torch.softmax(logits.float(), -1).max(-1)  # what `confident` compared with p_min
            self.cut = "threshold"
            self.cut_info = {"cut_token": int(token), "cut_prob": float(top), "p_min": self.p_min}
            return None
        token, q = choose(logits, self.sampling, self.generator)  # [1], [V] | None
        self.ids.append(token)
        if q is not None:
            self.qs.append(q)
        return token

    def proposal(self, info: dict[str, Any] | None = None) -> Proposal:
        """The drafted ids [k'] (long), their q [k', V] (None when greedy), info (the dict given, updated
        in place with `cut_info`) and why it ended."""
        ids = torch.cat(self.ids) if self.ids else torch.empty(0, dtype=torch.long)
        info = {} if info is None else info
        info.update(self.cut_info)
        return Proposal(ids, torch.stack(self.qs) if self.qs else None, info, self.cut)


class Drafter(ABC):
    """A source of draft tokens for one generation at a time. Its capabilities, read directly by the
    engine (defaults here: a drafter that declares none samples on the target's device, drafts one token
    per forward, reads no target features and keeps no target cache):

    - `device`: where it samples when that is a device of its own (a draft model, an EAGLE head); the
      engine then hands `propose` a generator there. None: the target's output device.
    - `parallel`: all k drafts come from one forward, so drafting more costs little (the draft-length
      controller reads it, docs/design.md §11).
    - `draft_state`: a label read before each round; acceptance is estimated per label (lookup's
      match-length buckets, "match 1" .. "match 16+"). None: one estimate. `state_priors`: the
      acceptance each state starts from before its rounds are measured (None: the controller's one).
    - `model_free`: it drafts without a model (lookup), so a round that drafts nothing costs it nothing
      later: the draft-length controller may then choose plain rounds (k = 0) on any engine, from the
      measured cost of a one-token forward.
    - `feature_layers`: the target hidden states it drafts from (EAGLE-style heads), by transformers'
      `output_hidden_states` index (i is the input of layer i; the number of layers is the final
      output). Non-empty: the engine runs every target forward with them and calls
      `observe_features(features)` right after it, before `commit`: first for the prefill (every prompt
      position but the last), then each round for [pending, d_1..d_k]; features is
      [n, len(feature_layers) * H] for those n positions, concatenated low -> high. Rows after pending
      and the `accepted` drafts belong to rejected tokens: the drafter drops them at `commit`. No extra
      target forward ever runs for the features.
    - `tree_size`: > 0 when it can propose token trees of up to that many nodes (`Proposal.is_tree`);
      the engine asks for one with `propose(k, .., nodes=tree_size)` in the rounds its cost model gives to
      trees (a chain otherwise), verifies every node in one masked target forward and calls
      `commit_tree(path, token)` instead of `commit`. A feature-reading drafter observes the features
      of the root (pending) and of the accepted path's nodes only, in that order, after verification
      and before `commit_tree`.
    - `tree_draws`: under sampling its trees' children are DRAWN from its q (draft model, EAGLE, heads),
      so the cost model cannot prune them after drafting: it chooses their shape before
      (`DraftLength.choose_shape`), and `propose(k, .., nodes=tree_size, shape=parents)` must grow that
      shape (`engine.tree.grow(.., shape=shape)`).
    - `shares_target_cache`: it drafts inside the target's own cache and computes the verify forward
      itself (self). The engine calls `attach(cache)` after the prefill and, every round (k >= 0
      drafted tokens), `verify_forward(ids [k+1], cache) -> logits [k+1, V]` instead of the target's
      plain forward; the result must equal what that forward would return, and leave k+1 new positions
      in every layer.
    """

    name: str
    device: torch.device | None = None
    parallel: bool = False
    draft_state: str | None = None
    state_priors: Mapping[str, float] | None = None
    model_free: bool = False
    feature_layers: tuple[int, ...] = ()
    shares_target_cache: bool = False
    tree_size: int = 0
    tree_width: int = 2
    tree_draws: bool = False

    @abstractmethod
    def reset(self, prompt_ids: list[int]) -> None:
        """Start a new generation from prompt_ids: drop all state from a previous one."""

    @abstractmethod
    def propose(
        self,
        k: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        nodes: int = 0,
        shape: Sequence[int] | None = None,
    ) -> Proposal:
        """Propose up to k tokens continuing everything committed so far; nodes > 0 (a drafter with a
        tree_size, only): a token tree of depth <= k and up to that many nodes instead of a chain; shape
        (a drafter with tree_draws, under sampling): the rank tree its draws follow."""

    @abstractmethod
    def commit(self, accepted: int, token: int) -> None:
        """The target kept the first `accepted` proposed tokens and appended `token`; update state."""

    def commit_tree(self, path: list[int], token: int) -> None:
        """After a tree round: the target kept the nodes `path` (root to leaf, node numbers of the last
        proposal) and appended `token`."""
        raise NotImplementedError(f"{type(self).__name__} declares tree_size but does not commit trees")

    def observe_features(self, features: torch.Tensor) -> None:
        """The target's hidden states [n, F] from the forward just run (called when feature_layers)."""
        raise NotImplementedError(f"{type(self).__name__} declares feature_layers but does not observe them")

    def attach(self, cache: Any) -> None:
        """The target's cache after the prefill (called when shares_target_cache)."""
        raise NotImplementedError(f"{type(self).__name__} declares shares_target_cache but does not attach")

    def verify_forward(self, ids: torch.Tensor, cache: Any) -> torch.Tensor:
        """The verify forward over ids [k+1] inside the target's cache (called when shares_target_cache)."""
        raise NotImplementedError(
            f"{type(self).__name__} declares shares_target_cache but has no verify_forward"
        )
