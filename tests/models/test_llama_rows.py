"""The llama.cpp engine's row rule (specli/models/llama_cpp/rows.py): measured per file by the probe,
trivial on the documented build but for K-quant prompts (tiled from 32 rows, alike among themselves),
found when a build's batch kernels round unlike its one-token ones (ggml's tiled K-quant path from 8
rows, as upstream takes it, in a child process), and, once found, what keeps that build exact. Under
a forced rule (throwaway rows, split batches, no prompt reuse) every strategy still gives llama.cpp's
own one-token decoding, padded as the rule pads.

These need llama-cpp-python: they skip without it, and fail instead when SPECLI_REQUIRE_LLAMA=1 (CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import test_llama_engine as engine_tests
import torch
from llama_reference import Reference, requantized
from test_llama_engine import CASES, PROMPTS

import specli
from specli.models.llama_cpp.rows import PROMPTS as PROMPT_SIZES
from specli.models.llama_cpp.rows import RowRule

ggufs = engine_tests.ggufs  # the fixture: the embedded pair as F32 GGUF files (one per module)


@pytest.fixture(scope="module")
def kquant(ggufs, tmp_path_factory) -> Path:
    """The embedded target requantized by llama.cpp to Q4_K_M (K-quant weights: ggml's tiled path)."""
    return requantized(ggufs["tiny-target"], tmp_path_factory.mktemp("kquant"), "Q4_K_M")


@pytest.fixture(scope="module")
def q8(ggufs, tmp_path_factory) -> Path:
    """The embedded target requantized by llama.cpp to Q8_0 (every matrix Q8_0, as both real models'
    tied LM heads are)."""
    return requantized(ggufs["tiny-target"], tmp_path_factory.mktemp("q8"), "Q8_0")


@pytest.fixture(scope="module")
def q4_1(ggufs, tmp_path_factory) -> Path:
    """The embedded target requantized by llama.cpp to Q4_1 (SmolLM2's type: upstream has no batch kernel
    for it, the documented build its own tiles, scripts/llama_q4_1_sgemm.inc)."""
    return requantized(ggufs["tiny-target"], tmp_path_factory.mktemp("q4_1"), "Q4_1")


UPSTREAM = os.environ.get("SPECLI_LLAMA_BUILD") == "upstream"  # the CMAKE_ARGS route, not install_llama.sh
# ggml's tiled K-quant matmul as upstream takes it (from 8 rows), on either build: upstream's switch, and
# the documented build's own switch and threshold
TILED_FROM_8 = {"GGML_CPU_TILED_MM": "1", "GGML_CPU_TILED_PREFILL": "1", "GGML_CPU_TILED_ROWS": "8"}
NOT_TILED = {"GGML_CPU_TILED_MM": "0", "GGML_CPU_TILED_PREFILL": "0"}


def _measure(path: Path, tiled: str | dict[str, str], flash: bool = False, threads: int = 1) -> RowRule:
    """The probe's rule for one attention (`measure_rows`) in a child process with ggml's tiled K-quant
    matmul on or off (upstream's switch `tiled`, or these variables; ggml reads them once per process)."""
    code = textwrap.dedent(
        """
        import json, sys
        from specli.models.llama_cpp.library import library
        from specli.models.llama_cpp.lm import BATCH, SEQUENCES, model_params
        from specli.models.llama_cpp.rows import measure_rows
        L = library().llama
        model = L.llama_model_load_from_file(sys.argv[1].encode(), model_params(L))
        rule = measure_rows(L, model, int(sys.argv[3]), BATCH, SEQUENCES, flash=sys.argv[2] == "1")
        print(json.dumps(rule.to_json()))
        """
    )
    switches = tiled if isinstance(tiled, dict) else {"GGML_CPU_TILED_MM": tiled}
    env = {**os.environ, **switches}
    args = [sys.executable, "-c", code, str(path), str(int(flash)), str(threads)]
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return RowRule.from_json(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("name", ["tiny-target", "kquant"])
def test_the_documented_build_scores_every_batch_as_steps(ggufs, kquant, name):
    """Built as the README says (one matmul kernel for every row count), every tested batch, verify- and
    prefill-sized, scores its rows as one-token steps: no throwaway rows, no splits, prompts reusable;
    with the tiled K-quant path off. So does the CMAKE_ARGS route (SPECLI_LLAMA_BUILD=upstream: no
    sgemm at all)."""
    rule = _measure(kquant if name == "kquant" else ggufs[name], NOT_TILED)
    assert rule == RowRule(), rule


@pytest.mark.parametrize("rows", ["2", "17", "64"])
def test_q8_0_batches_round_as_steps_through_either_kernel(q8, rows):
    """The documented build takes Q8_0 weights through ggml's dot products below
    GGML_CPU_SGEMM_Q8_0_ROWS rows (default 17: faster there) and llamafile's sgemm from there on, a lone
    step always through the dot products: both must round a Q8_0 row alike, so every tested batch and
    prompt scores as steps wherever the switch stands (2: every batch through sgemm, as upstream; 64:
    none). Upstream's route has no sgemm: the same."""
    rule = _measure(q8, {**NOT_TILED, "GGML_CPU_SGEMM_Q8_0_ROWS": rows})
    assert replace(rule, flash=False) == RowRule(), rule


@pytest.mark.parametrize("ftype", ["Q4_1", "Q5_0", "Q4_0"])
def test_legacy_quant_batches_score_as_steps_through_the_documented_builds_tiles(ggufs, tmp_path, ftype):
    """The documented build runs Q4_1 weights through its own tiles at every row count, a lone token too,
    and Q4_0/Q5_0 (Gemma 3's main type) through llamafile's; both in 1-row tiles up to 3 tokens, 4-row
    ones from 4, in 4-token columns and a narrower rest: every tested batch (2, 3, 4, 5, 8, 9, 16, 17)
    and prompt scores its rows as steps. Upstream's route has no sgemm: ggml's dot products, as steps."""
    rule = _measure(requantized(ggufs["tiny-target"], tmp_path, ftype), NOT_TILED)
    assert replace(rule, flash=False) == RowRule(), rule


def test_the_q4_1_tiles_compute_what_ggmls_dot_products_compute(q4_1, monkeypatch):
    """The tiles are not only self-consistent but right: a forward of 12 tokens through them (GGML_CPU_
    SGEMM_ROWS unset) and through ggml's dot products (64: below 64 rows) give the same logits up to
    rounding and the same top token at every position; and the documented build has them compiled in."""
    import llama_cpp

    from specli.models.llama_cpp.lm import LlamaLM, LlamaModel

    logits = {}
    ids = torch.tensor([(7 * i + 3) % 90 + 5 for i in range(12)])
    for rows in ("64", "1"):
        monkeypatch.setenv("GGML_CPU_SGEMM_ROWS", rows)  # read at every product
        lm = LlamaLM(LlamaModel(q4_1, q4_1.name, None, RowRule()))
        logits[rows] = lm.forward(ids, lm.new_cache()).clone()
        del lm
    dots, tiles = logits["64"], logits["1"]
    spread = float(dots.max() - dots.min())
    assert torch.allclose(tiles, dots, rtol=0, atol=1e-3 * spread), (tiles - dots).abs().max()
    assert torch.equal(tiles.argmax(-1), dots.argmax(-1))
    if not UPSTREAM:
        cpu = next(Path(llama_cpp.__file__).parent.rglob("libggml-cpu.so*"))
        assert b"specli_tinyBLAS" in cpu.read_bytes(), f"{cpu} was built without the Q4_1 tiles"


def test_the_documented_build_tiles_k_quant_prompts_alike_and_verifies_as_steps(kquant):
    """As installed (the tiled K-quant path on from 32 rows): every verify-sized batch of a K-quant file
    still scores as steps, prefill-sized ones round apart from steps but alike among themselves and with
    a short chunk padded to 33 rows (prefill_rows), so prompts are reused. Upstream's route keeps the
    tiled path off (specli's GGML_CPU_TILED_MM=0): every batch as steps."""
    rule = _measure(kquant, {})
    if UPSTREAM:
        assert rule == RowRule(), rule
    else:
        assert rule == RowRule(prefill_exact=False, prefill_rows=33), rule


def test_flash_attention_scores_verifies_as_steps_past_256_cells_on_two_threads(ggufs):
    """Measured after 260 tokens (a KV view of 512 cells) on 2 threads: on the documented build a lone
    query's keys are not split over the threads and long batches are not tiled, so every batch scores
    as steps. Upstream's source splits them (a step rounds unlike a batch row: only single tokens padded
    to 2 rows, a batch's path, are exact) and tiles 64-row prefills."""
    rule = _measure(ggufs["tiny-target"], "0", flash=True, threads=2)
    if UPSTREAM:
        assert rule == RowRule(least=2, prefill_exact=False, flash=True), rule
    else:
        assert rule == RowRule(flash=True), rule


def test_a_file_that_cannot_run_flash_attention_keeps_the_plain_rule(monkeypatch):
    """Where llama.cpp cannot open or decode a flash-attention context for the file, the probe still
    answers with the plain rule (the file loads as before) instead of failing."""
    from specli.models.llama_cpp import rows

    def measure_rows(llama, model, threads, batch, sequences, flash=False):
        if flash:
            raise RuntimeError("llama.cpp cannot open a context")
        return RowRule(least=2, most=9)

    monkeypatch.setattr(rows, "measure_rows", measure_rows)
    monkeypatch.setattr(rows, "step_seconds", None)  # nothing to time
    assert rows.measure(None, None, 1, 512, 69) == RowRule(least=2, most=9)


def test_a_file_slow_to_measure_is_not_measured_again_with_flash_attention(monkeypatch):
    """A big model on a slow CPU: past FLASH_BUDGET_S for the plain rule, the probe answers with it
    (its child must finish within the probe's timeout)."""
    from specli.models.llama_cpp import rows

    def measure_rows(llama, model, threads, batch, sequences, flash=False):
        assert not flash, "flash attention measured past the budget"
        return RowRule(most=9)

    clock = iter([0.0, rows.FLASH_BUDGET_S + 1])
    monkeypatch.setattr(rows, "measure_rows", measure_rows)
    monkeypatch.setattr(rows.time, "perf_counter", lambda: next(clock))
    assert rows.measure(None, None, 1, 512, 69) == RowRule(most=9)


def test_flash_attention_is_chosen_only_where_as_cheap_and_faster():
    """`choose`: the plain rule unless flash attention's costs no more (rows and prefills) and its
    steps are faster."""
    from specli.models.llama_cpp.rows import choose

    plain, flash = RowRule(prefill_exact=False), RowRule(prefill_exact=False, flash=True)
    assert choose(plain, flash, {False: 0.040, True: 0.036}) == flash
    assert choose(plain, flash, {False: 0.020, True: 0.022}) == plain
    assert choose(plain, RowRule(least=2, prefill_exact=False), {False: 0.04, True: 0.01}) == plain
    assert choose(plain, RowRule(most=5, prefill_exact=False), {False: 0.04, True: 0.01}) == plain
    assert choose(RowRule(), RowRule(prefill_exact=False), {False: 0.04, True: 0.01}) == RowRule()


def test_the_probe_finds_a_build_whose_batches_round_differently(kquant):
    """ggml's tiled K-quant matmul taking products of 8 rows or more (upstream's threshold): the probe
    finds batches exact up to 5 rows (the largest tested size under 8), prefill-sized ones not (but
    alike among themselves), so sizes no longer share one rounding."""
    rule = _measure(kquant, TILED_FROM_8)
    assert rule == RowRule(least=1, most=5, prefill_exact=False, prefill_rows=33) and not rule.shared, rule


def test_the_rule_makes_a_build_with_tiled_batches_exact_again(kquant):
    """In a child process with the tiled path on: a verify of 17 tokens differs from 17 one-token steps
    without a rule (the control) and equals them bit for bit under the rule the probe measured."""
    code = textwrap.dedent(
        """
        import json, sys, torch
        from specli.models.llama_cpp.lm import LlamaLM, LlamaModel
        from specli.models.llama_cpp.rows import RowRule
        out = {}
        for label, rule in (("bare", RowRule()), ("rule", RowRule.from_json(json.loads(sys.argv[2])))):
            lm = LlamaLM(LlamaModel(sys.argv[1], "kquant", None, rule))
            ids = torch.tensor([(5 * i + 2) % 90 + 3 for i in range(40)])
            cache = lm.new_cache()
            lm.forward(ids[:23], cache, last_only=True)
            block = lm.forward(ids[23:], cache).clone()
            lm.rewind(cache, 17)
            steps = torch.stack([lm.forward(ids[i : i + 1], cache)[0].clone() for i in range(23, 40)])
            out[label] = torch.equal(block, steps)
        print(json.dumps(out))
        """
    )
    rule = json.dumps(RowRule(least=1, most=5).to_json())
    env = {**os.environ, **TILED_FROM_8}
    done = subprocess.run(
        [sys.executable, "-c", code, str(kquant), rule], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"bare": False, "rule": True}


FORCED = RowRule(least=2, most=3)  # not shared: splits at 3 rows


@pytest.fixture(scope="module")
def forced_pair(ggufs):
    pair = specli.load(
        target=str(ggufs["tiny-target"]),
        draft=str(ggufs["tiny-draft"]),
        strategy=["draft", "lookup", "none"],
        engine="llama.cpp",
        threads=1,
    )
    pair.target.rule = pair.draft.rule = FORCED
    return pair


@pytest.mark.parametrize("case", list(CASES))
def test_under_a_forced_rule_every_strategy_is_one_token_decoding_padded_alike(forced_pair, ggufs, case):
    """Throwaway rows beside every lone token, verifies split at 3 rows, prompts prefilled as KV then
    their last token as a step: the ids are exactly llama.cpp's one-token steps padded to 2 rows (a
    row leaking into the chain's cells, a misplaced logits row or a lost split would change them)."""
    reference = Reference(ggufs["tiny-target"], threads=1, pad=FORCED.least)
    accepted = 0
    for prompt in PROMPTS:
        ids = forced_pair.prompt_ids(prompt, chat=False)
        result = forced_pair.generate(
            prompt_ids=ids, max_new_tokens=40, chat=False, ignore_eos=True, **CASES[case]
        )
        assert result.token_ids == reference.greedy(ids, 40)[0], (case, prompt)
        accepted += result.stats.accepted
    if case in ("lookup", "draft"):
        assert accepted > 0


def test_under_a_forced_rule_a_new_prompt_reuses_nothing(forced_pair):
    """Cells a differently split prefill wrote may round otherwise: with shared=False nothing is reused."""
    lm = forced_pair.target
    ids = forced_pair.prompt_ids(PROMPTS[1], chat=False)
    forced_pair.generate(prompt_ids=ids, max_new_tokens=4, chat=False, ignore_eos=True, strategy="none")
    forced_pair.generate(prompt_ids=ids + [5], max_new_tokens=4, chat=False, ignore_eos=True, strategy="none")
    assert lm.reused == 0


LONG_PROMPT = [(11 * i + 5) % 90 + 3 for i in range(48)]  # prefill-sized (past 32 rows)


def test_a_prefill_scores_its_last_token_as_a_step_would(ggufs):
    """Under the probe's rule a prompt's last logits are bitwise llama.cpp's prefix-then-step (the
    reference) at every prefill size the probe tries, in a fresh cache and after an earlier generation."""
    pair = specli.load(target=str(ggufs["tiny-target"]), strategy="none", engine="llama.cpp", threads=1)
    lm = pair.target
    reference = Reference(ggufs["tiny-target"], threads=1, flash=lm.rule.flash)
    for n in (*PROMPT_SIZES, len(LONG_PROMPT)):
        prompt = [(7 * i + 3) % (lm.vocab_size - 1) + 1 for i in range(n)]
        want = reference.next_logits(prompt)
        for _ in range(2):
            got = lm.forward(torch.tensor(prompt), lm.new_cache(), last_only=True)[0].numpy()
            assert np.array_equal(got, want), n


def test_where_prefills_round_apart_a_new_prompt_reuses_nothing(ggufs):
    """Cells a prefill-sized batch wrote round unlike a step's: a prompt sharing the earlier one's prefix
    prefills it again (prefill_exact False), and reuses it where prefills are exact (the control)."""
    pair = specli.load(target=str(ggufs["tiny-target"]), strategy="none", engine="llama.cpp", threads=1)
    reused = {}
    for exact in (False, True):
        pair.target.rule = RowRule(prefill_exact=exact)
        pair.forget_prompts()
        for ids in (LONG_PROMPT, LONG_PROMPT + [7, 8]):
            pair.generate(prompt_ids=ids, max_new_tokens=4, chat=False, ignore_eos=True, strategy="none")
        reused[exact] = pair.target.reused
    assert reused[False] == 0 and reused[True] >= len(LONG_PROMPT), reused


def test_where_prompts_round_alike_a_new_prompt_reuses_the_earlier_prompts_cells(kquant):
    """A K-quant file on the documented build (prompts tiled, `prefill_rows`), prefilled as the loop does
    (the prompt but its last token, then that token as the first round's step): a prompt extending an
    earlier one reuses the cells the earlier prefill wrote (not the generated ones), runs the rest's 9
    tokens padded to 33 rows, and its first logits are bitwise the one-token reference's, which
    prefills the prompt afresh; a prompt a fresh prefill runs as one short batch (20 tokens, not tiled)
    reuses nothing and is the reference's too, as does a longer one after it, whose fresh prefill tiles
    the rows that short batch wrote."""
    if UPSTREAM:
        pytest.skip("upstream's route runs no tiled prompts: every batch scores as steps (shared)")
    pair = specli.load(target=str(kquant), strategy="none", engine="llama.cpp", threads=1)
    lm = pair.target
    # flash attention is the probe's timed choice (either is exact here): the rule apart from it
    assert replace(lm.rule, flash=False) == RowRule(prefill_exact=False, prefill_rows=33), lm.rule
    reference = Reference(kquant, threads=1, flash=lm.rule.flash)
    pair.generate(prompt_ids=LONG_PROMPT, max_new_tokens=4, chat=False, ignore_eos=True)
    # extending it; a short one (one untiled batch); a long one sharing only the short one's cells
    for prompt, reused in (
        (LONG_PROMPT + [(5 * i + 7) % 90 + 3 for i in range(8)], len(LONG_PROMPT) - 1),
        (LONG_PROMPT[:21], 0),
        (LONG_PROMPT[:41], 0),
    ):
        cache = lm.new_cache()
        lm.forward(torch.tensor(prompt[:-1]), cache, last_only=True)
        assert lm.reused == reused, (len(prompt), lm.reused)
        got = lm.forward(torch.tensor(prompt[-1:]), cache)[0].numpy()
        assert np.array_equal(got, reference.next_logits(prompt)), len(prompt)


def test_the_probe_keeps_the_rule_per_file_and_threads(ggufs, tmp_path, monkeypatch):
    """Measured once in the child and kept in specli's cache: the second call reads it back."""
    from specli.models.llama_cpp import probe

    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path))
    rule = probe.check_runs(ggufs["tiny-target"], "tiny.gguf", 1)
    assert (rule.least, rule.most) == (1, 17), rule
    (mark,) = tmp_path.glob("llama-probe/*-t1.json")
    assert json.loads(mark.read_text())["rule"] == rule.to_json()
    monkeypatch.setattr(probe.subprocess, "run", None)  # a second child would fail the call
    assert probe.check_runs(ggufs["tiny-target"], "tiny.gguf", 1) == rule


def test_the_header_names_the_rule_a_file_needs(forced_pair, ggufs):
    """The engine line says what exactness costs on this file, and flash attention where it is on; the
    exact build's says nothing more."""
    assert forced_pair.describe_engine().endswith(
        "thread; single tokens padded to 2 rows, batches split at 3 rows)"
    )
    plain = specli.load(target=str(ggufs["tiny-target"]), strategy="none", engine="llama.cpp", threads=1)
    plain.target.rule = RowRule(prefill_exact=False)
    assert plain.describe_engine().endswith(" 1 thread)")
    plain.target.rule = RowRule(prefill_exact=False, flash=True)
    assert plain.describe_engine().endswith(" 1 thread, flash attention)")


def test_with_flash_attention_past_512_cells_verifies_score_as_steps_on_two_threads(ggufs):
    """Flash attention on (the rule), 2 threads, a 300-token prompt (past the 256 live cells where the KV
    view grows to 512): a 9-token verify's logits are bitwise llama.cpp's own one-token steps with flash
    attention, and the greedy ids of lookup and plain decoding are its one-token decoding. An engine
    that left flash attention off would differ, and so does upstream's build, which splits a step's keys
    (SPECLI_LLAMA_BUILD=upstream: the test then asserts the difference)."""
    pair = specli.load(target=str(ggufs["tiny-target"]), strategy=["lookup", "none"], engine="llama.cpp",
                       threads=2)  # fmt: skip
    lm = pair.target
    lm.rule = RowRule(flash=True)
    reference = Reference(ggufs["tiny-target"], threads=2, flash=True)
    prompt = [(13 * i + 7) % 90 + 3 for i in range(300)]
    cache = lm.new_cache()
    lm.forward(torch.tensor(prompt[:291]), cache, last_only=True)
    block = lm.forward(torch.tensor(prompt[291:]), cache).numpy()
    steps = reference.step_logits(prompt[:291], prompt[291:])
    same = [np.array_equal(block[i], steps[i]) for i in range(9)]
    if os.environ.get("SPECLI_LLAMA_BUILD") == "upstream":  # the control: its steps split their keys
        assert not any(same), same
        return
    assert all(same), same
    expected = reference.greedy(prompt, 40)[0]
    for strategy in ("none", "lookup"):
        result = pair.generate(prompt_ids=prompt, max_new_tokens=40, chat=False, ignore_eos=True,
                               strategy=strategy)  # fmt: skip
        assert result.token_ids == expected, strategy
