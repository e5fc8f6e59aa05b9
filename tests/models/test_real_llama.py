"""The llama.cpp engine on the real models (issue 38 #4): SmolLM2-135M (Q4_1) and Gemma 3 270M (Q4_K_M)
evaluated by llama.cpp on their own GGUF files. Every strategy the engine runs gives exactly llama.cpp's
own one-token-at-a-time decoding of the same file (`llama_reference`): plain, lookup (chains: trees are
refused there), blockwise heads (fitted here to each model's continuation), and on SmolLM2 a draft model
(its first 27 layers, built here as a transformers folder in bfloat16 and written once as a GGUF by
specli; the one `specli train` made is not shipped). Gemma's
prompt + output passes its 512-token sliding window, so rejected drafts are rewound past it.

Marked `real` (run with -m real); skips without the packages or llama-cpp-python, and fails instead
under SPECLI_REQUIRE_REAL=1 / SPECLI_REQUIRE_LLAMA=1 (CI).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from llama_reference import Reference, llama_or_skip
from test_real_models import _gguf_or_skip, truncated_draft

import specli
from specli.models import loading, sources

pytestmark = pytest.mark.real

TOKENS = 40
CASES = {
    "none": {"strategy": "none"},
    "lookup": {"strategy": "lookup", "num_draft_tokens": 8, "fixed_k": True},
    "lookup, cost model": {"strategy": "lookup"},
}
PROMPTS = [
    "Rewrite this sentence with the words in the same order: the cat sat on the mat, and the cat "
    "sat on the mat again, and then the cat",
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
]


def _run(
    name: str,
    cases: dict,
    prompts: list[str],
    extra_tokens: int = 0,
    draft: str | None = None,
    flash: bool | None = None,
):
    """Every case's greedy ids are the reference's; `flash`: flash attention forced on or off (else the
    probe's choice), the reference decoding with the same attention."""
    llama_or_skip()
    path = _gguf_or_skip(name)
    strategies = sorted({case["strategy"] for case in cases.values()})
    pair = specli.load(
        target=f"package:{name}", draft=draft, strategy=strategies, engine="llama.cpp", threads=2
    )
    if flash is not None:
        pair.target.rule = replace(pair.target.rule, flash=flash)
    reference = Reference(path, threads=2, flash=pair.target.rule.flash)  # the probe's attention
    drafted = 0
    for prompt in prompts:
        ids = pair.prompt_ids(prompt, chat=False)
        expected, gaps = reference.greedy(ids, TOKENS + extra_tokens)
        for case, options in cases.items():
            result = pair.generate(
                prompt_ids=ids, max_new_tokens=TOKENS + extra_tokens, ignore_eos=True, **options
            )
            if result.token_ids != expected:
                pairs = zip(result.token_ids, expected, strict=False)
                first = next(i for i, (a, b) in enumerate(pairs) if a != b)
                pytest.fail(f"{name} {case}: differs at token {first} (top-2 gap there {gaps[first]:.4f})")
            drafted += result.stats.drafted
    assert drafted > 0


# runs past 512 cached positions, where llama.cpp's attention kernels change path
LONG_LOG = "Summarize this log, then list every line that repeats:\n" + "".join(
    f"{i:03d} INFO worker {i % 7} finished job {i * 13 % 50} in {i % 9}.{i % 10}s\n" for i in range(48)
)


def _smollm2_draft(folder) -> str:
    """A draft model sharing SmolLM2's tokenizer: its first layers (test_real_models.truncated_draft),
    from the float32 folder specli dequantizes the package's GGUF into."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = loading.resolve_source("package:smollm2-135m", weights=True, dtype="float32")
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    return str(truncated_draft(model, folder, AutoTokenizer.from_pretrained(source)))


def test_smollm2_every_strategy_is_one_token_decoding(tmp_path):
    llama_or_skip()
    _gguf_or_skip("smollm2-135m")
    cases = {**CASES, "draft": {"strategy": "draft", "num_draft_tokens": 4, "fixed_k": True}}
    converted = sources.specli_cache_dir() / "llama-gguf"  # where specli writes the draft's GGUF
    before = set(converted.glob("draft-*.gguf"))
    try:
        _run("smollm2-135m", cases, [PROMPTS[0], LONG_LOG], draft=_smollm2_draft(tmp_path / "draft"))
    finally:  # a 0.45 GB file keyed by this run's folder: no later run reads it
        for path in set(converted.glob("draft-*.gguf")) - before:
            path.unlink()


def test_smollm2_with_flash_attention_forced_on_past_512_cells_is_one_token_decoding():
    """The probe keeps flash attention off for SmolLM2 (its steps are slower with it); forced on, the
    ~720-token case that failed while upstream split a step's keys over the threads is exact on the
    documented build."""
    _run("smollm2-135m", {k: CASES[k] for k in ("none", "lookup")}, [LONG_LOG], flash=True)


def test_gemma3_past_its_sliding_window_is_one_token_decoding():
    long = ("The river flows to the sea. " * 70) + "The river"  # ~490 tokens: the output passes 512
    _run("gemma3-270m", CASES, [PROMPTS[1], long], extra_tokens=24)


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_heads_draft_from_llama_cpps_states_of_the_quantized_file(name, tmp_path):
    """Blockwise heads on the real files: their LM head is the file's own quantized tensor dequantized
    (Q4_1 / Q8_0) and scores llama.cpp's final hidden states as llama.cpp's logits do (same argmax, close
    values); sequential heads fitted to the torch model's continuation draft there, and the output is
    llama.cpp's own one-token decoding."""
    import torch
    from test_heads import fitted_heads
    from transformers import AutoModelForCausalLM

    from specli.models.blockwise_heads import save_heads

    llama_or_skip()
    path = _gguf_or_skip(name)
    source = loading.resolve_source(f"package:{name}", weights=True, dtype="float32")
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    pair0 = specli.load(target=f"package:{name}", strategy="none", engine="llama.cpp", threads=2)
    prompt = pair0.prompt_ids(PROMPTS[1], chat=False)
    heads = fitted_heads(model.eval(), prompt, n=24, steps=40, sequential=True, k=3)
    folder = save_heads(heads, tmp_path / "heads", f"package:{name}")
    pair = specli.load(
        target=f"package:{name}", draft=str(folder), strategy="heads", engine="llama.cpp", threads=2
    )
    lm = pair.target
    _, states = lm.forward_features(torch.tensor(prompt), lm.new_cache(), (lm.depth,))
    logits = lm.forward(torch.tensor(prompt), lm.new_cache()).clone()
    ours = pair.target_model.get_output_embeddings()(states)  # [n, V]
    # llama.cpp rounds the activations to 8 bits for its quantized dot products: measured, argmax equal
    # at 97 % (SmolLM2) and 100 % (Gemma 3) of the prompt's rows, logits within 0.42 of ~40 at most; a
    # wrong tensor, row or layout agrees nowhere
    assert (ours.argmax(-1) == logits.argmax(-1)).float().mean() >= 0.9
    assert (ours - logits).abs().max() < 1.0
    result = pair.generate(prompt_ids=prompt, max_new_tokens=TOKENS, ignore_eos=True, fixed_k=True,
                           num_draft_tokens=3)  # fmt: skip
    assert result.token_ids == Reference(path, threads=2, flash=lm.rule.flash).greedy(prompt, TOKENS)[0]
    assert result.stats.accepted > 0
