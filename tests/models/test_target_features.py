"""The drafter protocol's feature path (EAGLE-style drafters): the target's hidden states reach the
drafter from the forwards the engine runs anyway -- the prefill and each verify -- never from an extra
forward, and the rows that belong to committed tokens are exactly the target's own features."""

from __future__ import annotations

import pytest
import torch
from conftest import make_model

from specli.engine.drafter import Drafter, Proposal
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig
from specli.engine.stopping import StopCriteria
from specli.models.cached_lm import CachedLM


class FeatureRecorder(Drafter):
    """Proposes the target's greedy continuation with every third token wrong; keeps the features the
    engine hands it and, at commit, only the rows of tokens that stayed."""

    name = "recorder"

    def __init__(self, layers: tuple[int, ...], reference: list[int], vocab: int) -> None:
        self.feature_layers = layers
        self.reference = reference  # the target's greedy continuation
        self.vocab = vocab
        self.kept: list[torch.Tensor] = []
        self.observed = 0
        self._last: torch.Tensor | None = None
        self._length = 0  # generated tokens committed so far

    def reset(self, prompt_ids: list[int]) -> None:
        self.kept, self.observed, self._last, self._length = [], 0, None, 0

    def observe_features(self, features: torch.Tensor) -> None:
        self.observed += 1
        if not self.kept and self._last is None and self.observed == 1:
            self.kept.append(features)  # the prefill: every prompt position but the last
        else:
            self._last = features  # [k+1, F] for [pending, d_1..d_k]

    def propose(self, k: int, sampling: SamplingConfig, generator: torch.Generator | None) -> Proposal:
        ids = []
        for i in range(k):
            token = self.reference[self._length + i]
            ids.append((token + 1) % self.vocab if (self._length + i) % 3 == 2 else token)
        return Proposal(torch.tensor(ids, dtype=torch.long))

    def commit(self, accepted: int, token: int) -> None:
        assert self._last is not None, "the verify forward's features must arrive before commit"
        self.kept.append(self._last[: accepted + 1])  # pending + the accepted drafts
        self._last = None
        self._length += accepted + 1


@pytest.mark.parametrize("layers", [(0, 1, 3), (2,), (3, 1)])
def test_drafter_sees_the_targets_own_features_from_the_forwards_already_run(layers):
    model = make_model("llama", 384, layers=3, seed=3, eos_token_id=None).eval()
    target = CachedLM(model)
    prompt = [5, 17, 42, 9, 100, 7]
    reference = model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, pad_token_id=0)[
        0, len(prompt) :
    ].tolist()

    calls = 0
    original = model.forward

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    model.forward = counted
    drafter = FeatureRecorder(layers, reference, 384)
    assert drafter.feature_layers == layers  # the capability the engine reads
    rounds = list(
        generate_rounds(
            target, drafter, prompt, EngineConfig(max_new_tokens=20, num_draft_tokens=4), StopCriteria(set())
        )
    )
    generated = [t for r in rounds for t in r.committed]
    assert generated == reference[:20]  # still lossless
    assert any(r.accepted < len(r.drafted) for r in rounds)  # rejections happened: rows were dropped
    assert calls == len(rounds) + 1  # the prefill and one verify per round: no extra forward
    assert drafter.observed == len(rounds) + 1

    model.forward = original
    full = prompt + generated[:-1]  # every position whose features exist once the last token is pending
    with torch.no_grad():
        hidden = model(torch.tensor([full]), output_hidden_states=True).hidden_states
    expected = torch.cat([hidden[i][0] for i in layers], -1)  # [len(full), F]
    got = torch.cat(drafter.kept)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
