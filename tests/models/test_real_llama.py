"""The llama.cpp engine on the real models (issue 38 #4): SmolLM2-135M (Q4_1) and Gemma 3 270M (Q4_K_M)
evaluated by llama.cpp on their own GGUF files. Every strategy the engine runs gives exactly llama.cpp's
own one-token-at-a-time decoding of the same file (`llama_reference`): plain, lookup as chains and
trees, and on SmolLM2 the draft model specli trained for it (embedded, written once as a GGUF). Gemma's
prompt + output passes its 512-token sliding window, so rejected drafts are rewound past it.

Marked `real` (run with -m real); skips without the packages or llama-cpp-python, and fails instead
under SPECLI_REQUIRE_REAL=1 / SPECLI_REQUIRE_LLAMA=1 (CI).
"""

from __future__ import annotations

import pytest
from llama_reference import Reference, llama_or_skip
from test_real_models import _gguf_or_skip

import specli

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


def _run(name: str, cases: dict, prompts: list[str], extra_tokens: int = 0, draft: str | None = None):
    llama_or_skip()
    path = _gguf_or_skip(name)
    strategies = sorted({case["strategy"] for case in cases.values()})
    pair = specli.load(
        target=f"package:{name}", draft=draft, strategy=strategies, engine="llama.cpp", threads=2
    )
    reference = Reference(path, threads=2)
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


def test_smollm2_every_strategy_is_one_token_decoding():
    cases = {**CASES, "draft": {"strategy": "draft", "num_draft_tokens": 4, "fixed_k": True}}
    # the second prompt runs past 512 cached positions, where llama.cpp's attention kernels change path
    long = "Summarize this log, then list every line that repeats:\n" + "".join(
        f"{i:03d} INFO worker {i % 7} finished job {i * 13 % 50} in {i % 9}.{i % 10}s\n" for i in range(48)
    )
    _run("smollm2-135m", cases, [PROMPTS[0], long], draft="embedded:smollm2-135m-draft")


def test_gemma3_past_its_sliding_window_is_one_token_decoding():
    long = ("The river flows to the sea. " * 70) + "The river"  # ~490 tokens: the output passes 512
    _run("gemma3-270m", CASES, [PROMPTS[1], long], extra_tokens=24)
