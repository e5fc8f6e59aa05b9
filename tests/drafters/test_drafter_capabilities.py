"""A drafter's capabilities are the attributes it declares on `Drafter` (issue 29), read directly by the
engine: what a drafter can do (methods it inherits or defines) never switches the target forward; what
it declares does."""

from __future__ import annotations

import torch
from conftest import make_model

from specli.engine.drafter import Drafter, Proposal
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig
from specli.engine.stopping import StopCriteria
from specli.models.cached_lm import CachedLM

PROMPT = [5, 17, 42, 9, 100, 7]


class Reference(Drafter):
    """Proposes the target's greedy continuation with every third token wrong. It can observe features
    (it records any it is handed) but declares no capability."""

    name = "reference"

    def __init__(self, reference: list[int], vocab: int) -> None:
        self.reference, self.vocab = reference, vocab
        self.length, self.observed = 0, 0

    def reset(self, prompt_ids: list[int]) -> None:
        self.length, self.observed = 0, 0

    def observe_features(self, features: torch.Tensor) -> None:
        self.observed += 1

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None) -> Proposal:
        at = range(self.length, min(self.length + k, len(self.reference)))
        ids = [(self.reference[i] + 1) % self.vocab if i % 3 == 2 else self.reference[i] for i in at]
        return Proposal(torch.tensor(ids, dtype=torch.long))

    def commit(self, accepted: int, token: int) -> None:
        self.length += accepted + 1


def test_a_drafter_that_declares_no_capability_gets_the_plain_target_forward():
    """Catches capabilities detected from what a drafter has (isinstance on a runtime-checkable
    protocol, hasattr, getattr): every Drafter inherits attach and verify_forward, and this one can
    observe features, yet it declares neither shares_target_cache nor feature_layers, so the engine runs
    the target's own forward, hands it no features, and the output is the target's greedy output."""
    model = make_model("llama", 384, layers=2, seed=3, eos_token_id=None).eval()
    reference = model.generate(torch.tensor([PROMPT]), max_new_tokens=16, do_sample=False, pad_token_id=0)
    reference = reference[0, len(PROMPT) :].tolist()
    drafter = Reference(reference, 384)
    config = EngineConfig(max_new_tokens=16, num_draft_tokens=3, fixed_k=True, seed=0)
    rounds = list(generate_rounds(CachedLM(model), drafter, PROMPT, config, StopCriteria(set())))
    assert [t for r in rounds for t in r.committed] == reference
    assert drafter.observed == 0 and sum(r.accepted for r in rounds) > 0
    assert (drafter.device, drafter.parallel, drafter.draft_state) == (None, False, None)  # the defaults
