"""The distribution the verifier samples from (specli/engine/verify.py `verify`) at temperatures other than
1: the target's logits processed exactly once, as transformers' warpers process them. At temperature 1 a
temperature applied twice (or not at all) changes nothing, so the losslessness tests there cannot see it.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper

from specli.engine.sampling import SamplingConfig
from specli.engine.verify import verify

LOGITS = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5, -2.0], [0.0, 3.0, 1.0, 0.2, -1.0, 0.0]])  # [k+1, V], k = 1


def _transformers(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """generate()'s next-token distribution for those settings (temperature, then top-k)."""
    warpers = LogitsProcessorList([TemperatureLogitsWarper(cfg.temperature)])
    if cfg.top_k:
        warpers.append(TopKLogitsWarper(cfg.top_k))
    return warpers(None, logits.clone()).softmax(-1)


@pytest.mark.parametrize("cfg", [SamplingConfig(0.5), SamplingConfig(1.7), SamplingConfig(0.7, top_k=3)])
def test_the_verifier_samples_the_targets_distribution_at_that_temperature(cfg):
    """Bug caught: the target's logits divided by the temperature once more (or not at all) before
    verification: the output then follows another temperature than the one asked for."""
    expected = _transformers(LOGITS, cfg)  # [2, V]
    generator = torch.Generator().manual_seed(0)
    plain = verify(torch.empty(0, dtype=torch.long), LOGITS[:1], None, cfg, generator, record_top=6)
    shown = dict(plain.token_source)
    for token in range(LOGITS.shape[1]):  # a plain step draws from p_1 itself
        assert shown.get(token, 0.0) == pytest.approx(float(expected[0, token]), abs=1e-6)
    drafted = int(expected[0].argmax())
    chain = verify(torch.tensor([drafted]), LOGITS, None, cfg, generator)
    assert chain.accept_probs == pytest.approx([float(expected[0, drafted])], abs=1e-6)  # min(1, p / 1)
