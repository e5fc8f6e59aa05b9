"""bitsandbytes 8-bit and 4-bit targets on CPU decode losslessly relative to the quantized model itself."""

from __future__ import annotations

import pytest
import torch
from conftest import make_model, save_model

import specli

pytest.importorskip("bitsandbytes")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer):
    """Weights at a realistic scale (init 0.02). With activations far above LLM.int8's outlier threshold
    (6.0) the 8-bit matmul picks outlier columns from the whole batch of tokens, so a (k+1)-token verify is
    not bit-identical to one-token steps: transformers' own assisted generation diverges there too."""
    root = tmp_path_factory.mktemp("quant")
    vocab = len(tokenizer)
    target = save_model(
        root / "t",
        make_model("llama", vocab, layers=2, hidden=128, seed=5, eos_token_id=None, init_range=0.02),
        tokenizer,
    )
    draft = save_model(
        root / "d",
        make_model("llama", vocab, layers=1, hidden=128, seed=6, eos_token_id=None, init_range=0.02),
        tokenizer,
    )
    return target, draft


@pytest.mark.parametrize("quant", ["8bit", "4bit"])
def test_quantized_target_is_lossless_against_its_own_generate(folders, quant):
    target, draft = folders
    for drafter in (draft, target):  # a disagreeing drafter, and the (unquantized) target drafting for itself
        pair = specli.load(target=str(target), draft=str(drafter), device="cpu", quant=quant)
        assert (
            getattr(pair.target_model, "is_quantized", False) or pair.target_model.config.quantization_config
        )
        pair.eos_ids = set()
        for prompt in ("def fibonacci(n):", "The quick brown fox"):
            ids = pair.encode(prompt, chat=False)
            expected = pair.target_model.generate(
                torch.tensor([ids]), max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0
            )[0, len(ids) :].tolist()
            for k in (1, 4):
                result = pair.generate(prompt_ids=ids, max_new_tokens=16, num_draft_tokens=k)
                assert result.token_ids == expected, (quant, prompt, k)


def test_cli_says_cpu_quantization_is_slow(folders):
    from typer.testing import CliRunner

    from specli.cli import app

    target, draft = folders
    result = CliRunner().invoke(
        app,
        ["generate", "hi", "--target", str(target), "--draft", str(draft), "--quant", "4bit",
         "--device", "cpu", "--max-new-tokens", "4"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "quantization on CPU works but is slow" in result.stderr


@pytest.mark.parametrize("strategy", ["self", "lookup"])
def test_quantized_target_with_model_free_strategies_is_lossless(folders, strategy):
    target, _ = folders
    pair = specli.load(target=str(target), strategy=strategy, device="cpu", quant="4bit")
    prompt = [5, 6, 7, 8, 5, 6, 7]
    ids = torch.tensor([prompt])
    expected = pair.target_model.generate(ids, max_new_tokens=16, do_sample=False)[0, len(prompt) :].tolist()
    result = pair.generate(prompt_ids=prompt, max_new_tokens=16, exit_layer=1)
    assert result.token_ids == expected
