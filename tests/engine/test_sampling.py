"""process_logits must mean what transformers' warpers mean (temperature, then top-k, then top-p, then
min-p)."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig, GenerationMixin
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specli.engine.sampling import SamplingConfig, process_logits, sample


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


class _Generator(GenerationMixin):
    """Just transformers' generation mixin: what builds generate()'s logits processors."""


@pytest.mark.parametrize(
    "temperature,top_k,top_p,min_p",
    [(1.0, 0, 1.0, 0.1), (0.7, 0, 1.0, 0.3), (1.5, 8, 1.0, 0.2), (0.9, 0, 0.8, 0.4), (1.2, 6, 0.7, 0.5),
     (0.5, 0, 1.0, 1.0)],
)  # fmt: skip
def test_min_p_matches_transformers_own_processor_list(temperature, top_k, top_p, min_p):
    """The warpers transformers' generate() itself builds (its order, not a list written here): min-p
    after temperature, top-k and top-p. Catches min-p at another place in the order (before top-p, or on
    the unscaled logits), or a threshold not relative to the top token."""
    torch.manual_seed(1)
    logits = torch.randn(6, 64) * 3
    config = GenerationConfig(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    warpers = _Generator()._get_logits_processor(
        config, input_ids_seq_length=1, encoder_input_ids=None,
        prefix_allowed_tokens_fn=None, logits_processor=LogitsProcessorList(),
    )  # fmt: skip
    assert [type(w) for w in warpers][-1] is MinPLogitsWarper
    expected = warpers(torch.zeros(6, 1, dtype=torch.long), logits.clone()).softmax(-1)
    got = process_logits(logits, SamplingConfig(temperature, top_k, top_p, min_p))
    torch.testing.assert_close(got, expected)
    assert (got == 0).any()  # min-p cut something: the case tests it


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


def test_sample_draws_each_id_with_its_probability_and_never_a_zero_one():
    """Catches an off-by-one in the inverse transform (the id before or after), ids of probability 0
    drawn (at either end or between), unnormalised rows read as normalised, and rows mixed up: 40,000
    draws per row against the row's probabilities by a G-test (critical value at p = 0.001)."""
    probs = torch.tensor(
        [
            [0.0, 0.1, 0.0, 0.4, 0.2, 0.0, 0.3, 0.0],
            [0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5],
            [2.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0],  # sums to 4
        ]
    )
    generator = torch.Generator().manual_seed(11)
    draws = torch.stack([sample(probs, generator) for _ in range(40_000)])  # [40000, 3]
    for row in range(3):
        counts = torch.bincount(draws[:, row], minlength=8).double()
        expected = probs[row].double() / probs[row].sum() * counts.sum()
        assert (counts[expected == 0] == 0).all(), (row, counts)
        seen = expected > 0
        g = 2 * (counts[seen] * (counts[seen] / expected[seen]).log()).sum()
        critical = {1: 10.83, 2: 13.82, 3: 16.27}[int(seen.sum()) - 1]
        assert g < critical, (row, counts.tolist(), float(g))


def test_sample_refuses_a_row_torch_refuses():
    """A row with a negative or NaN entry, or nothing to draw, raises as torch.multinomial does instead
    of drawing an id."""
    for bad in ([0.5, -0.1, 0.6], [float("nan"), 0.5, 0.5], [0.0, 0.0, 0.0]):
        with pytest.raises(RuntimeError):
            sample(torch.tensor([bad]), torch.Generator().manual_seed(0))


def test_min_p_and_ignore_eos_settings_are_checked_and_reach_the_sampling_config():
    """Catches: min_p dropped between Settings and the engine's SamplingConfig, and values out of range
    (or of the wrong type) accepted."""
    from specli.errors import UsageError
    from specli.settings import resolve_settings

    settings = resolve_settings(temperature=0.8, min_p=0.25, ignore_eos=True)
    assert settings.sampling == SamplingConfig(0.8, 0, 1.0, 0.25) and settings.ignore_eos
    assert resolve_settings().min_p == 0.0 and not resolve_settings().ignore_eos
    for bad in (-0.1, 1.5, float("nan"), True, "x"):
        with pytest.raises(UsageError, match="min_p"):
            resolve_settings(min_p=bad)
    with pytest.raises(UsageError, match="ignore_eos"):
        resolve_settings(ignore_eos="yes")
