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


_KERNELS_NOISE = "gemm_4bit_forward"


def _stderr_of(code: str, *args: str) -> str:
    """stderr of a fresh interpreter: bitsandbytes logs its kernels warning once, when first imported."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_4bit_load_on_cpu_says_nothing_about_bitsandbytes_kernels(folders):
    """Catches bitsandbytes' 'Failed to load CPU gemm_4bit_forward ... pip install kernels' reaching stderr
    (issue 13 #13): bitsandbytes logs it on import, on CPUs with AVX512-BF16 when `kernels` is missing."""
    if _KERNELS_NOISE not in _stderr_of("import bitsandbytes"):
        pytest.skip("bitsandbytes has no kernels warning to give here (no AVX512-BF16, or kernels installed)")
    target, _ = folders
    code = (
        "import sys, torch\n"
        "from pathlib import Path\n"
        "from specli.models import loading\n"
        "model = loading.load_model(Path(sys.argv[1]), device=torch.device('cpu'), dtype=torch.float32,"
        " quant='4bit')\n"
        "assert model.config.quantization_config.load_in_4bit\n"
        "model(torch.tensor([[1, 2, 3]]))\n"
    )
    assert _KERNELS_NOISE not in _stderr_of(code, str(target))


def test_quantized_target_with_an_eagle_head_is_lossless(folders, tmp_path):
    """The head reads a 4-bit target's hidden states (its compute dtype) and drafts beside its LM head."""
    from transformers import AutoModelForCausalLM

    from specli.models.eagle_head import EagleHead, init_weights
    from specli.models.head_formats import save_head
    from specli.training.eagle import head_config

    target, _ = folders
    model = AutoModelForCausalLM.from_pretrained(target)
    save_head(init_weights(EagleHead(head_config(model, "eagle3", 300, 64)), std=0.1, seed=1), tmp_path / "h")
    pair = specli.load(
        target=str(target), draft=str(tmp_path / "h"), strategy="eagle", device="cpu", quant="4bit"
    )
    pair.eos_ids = set()
    ids = pair.encode("def fibonacci(n):", chat=False)
    expected = pair.target_model.generate(
        torch.tensor([ids]), max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0
    )[0, len(ids) :].tolist()
    result = pair.generate(prompt_ids=ids, max_new_tokens=16, num_draft_tokens=3)
    assert result.token_ids == expected and result.stats.drafted > 0
