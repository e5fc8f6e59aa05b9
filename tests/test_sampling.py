"""process_logits must mean what transformers' warpers mean (temperature, then top-k, then top-p)."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specli.sampling import SamplingConfig, process_logits, sample


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.8), (0.8, 7, 0.9), (2.0, 3, 0.5), (1.0, 1, 1.0)],
)
def test_matches_transformers_warpers(temperature, top_k, top_p):
    torch.manual_seed(0)
    logits = torch.randn(4, 50) * 3
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)])
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1:
        warpers.append(TopPLogitsWarper(top_p))
    expected = warpers(None, logits.clone()).softmax(-1)
    got = process_logits(logits, SamplingConfig(temperature, top_k, top_p))
    torch.testing.assert_close(got, expected)


def test_greedy_is_one_hot_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0], [5.0, 5.0, 1.0]])
    probs = process_logits(logits, SamplingConfig(0.0))
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]  # ties go to the first index, as argmax


def test_top_p_keeps_at_least_one_token():
    logits = torch.tensor([[10.0, 0.0, 0.0]])
    probs = process_logits(logits, SamplingConfig(1.0, 0, 0.01))
    assert probs[0, 0] == 1.0


def test_sample_is_reproducible_with_a_seed():
    probs = torch.full((3, 10), 0.1)
    a = sample(probs, torch.Generator().manual_seed(5))
    b = sample(probs, torch.Generator().manual_seed(5))
    assert a.shape == (3,) and a.tolist() == b.tolist()
