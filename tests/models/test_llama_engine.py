"""The llama.cpp engine (issue 38) on the embedded pair written as GGUF files: lossless against
llama.cpp's own one-token decoding of the same file (`llama_reference`, raw bindings, a context of its
own), for every strategy it runs, chains and trees; the tree forward against each path's own forward;
rewinds; sampling in distribution (G-test with its biased control); choosing the engine; bad files.

These need llama-cpp-python: they skip without it, and fail instead when SPECLI_REQUIRE_LLAMA=1 (CI).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from llama_reference import Reference, llama_or_skip, requantized
from test_lossless_sampling import GreedyDraftReportingSoftmax, g_test_pvalue
from typer.testing import CliRunner

import specli
from specli.cli import app
from specli.drafters.draft_model import DraftModelDrafter
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig, process_logits
from specli.engine.stopping import StopCriteria
from specli.errors import UsageError
from specli.models import engines
from specli.models.sources import embedded_model
from specli.strategies import LOOKUP_DRAFT_TOKENS, LOOKUP_DRAFT_TOKENS_LLAMA

PROMPTS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "for i in range(10):\n    print(i)\nfor i in range(10):\n",
]


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> dict[str, Path]:
    """The embedded tiny target and drafter as F32 GGUF files (specli's own writer)."""
    llama_or_skip()
    from transformers import AutoModelForCausalLM

    from specli.models.gguf_write import write_gguf
    from specli.models.loading import load_tokenizer

    root = tmp_path_factory.mktemp("gguf")
    out = {}
    for name in ("tiny-target", "tiny-draft"):
        folder = embedded_model(name)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        out[name] = write_gguf(root / f"{name}.gguf", model, load_tokenizer(folder), name=name)
    return out


@pytest.fixture(scope="module")
def pair(ggufs):
    return specli.load(
        target=str(ggufs["tiny-target"]),
        draft=str(ggufs["tiny-draft"]),
        strategy=["draft", "lookup", "none"],
        engine="llama.cpp",
        threads=1,
    )


@pytest.fixture(scope="module")
def reference(ggufs, pair) -> Reference:
    return Reference(ggufs["tiny-target"], threads=1, flash=pair.target.rule.flash)


def test_the_pair_runs_on_llama_cpp(pair):
    assert pair.engine == "llama.cpp"
    assert type(pair.target).__name__ == "LlamaLM" and type(pair.draft).__name__ == "LlamaLM"
    assert "llama.cpp" in pair.describe_engine()


CASES = {
    "none": {"strategy": "none"},
    "lookup": {"strategy": "lookup", "num_draft_tokens": 6, "fixed_k": True},
    "draft": {"strategy": "draft", "num_draft_tokens": 4, "fixed_k": True},
    "draft, cost model": {"strategy": "draft", "num_draft_tokens": 6},
}


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_output_is_llama_cpps_own_one_token_decoding(pair, reference, case):
    """Every strategy on the engine gives exactly the ids of llama.cpp's one-token steps on the same file;
    the drafting cases both accept and reject drafts, so rewinds and the kept tree paths are exercised."""
    accepted = rejections = 0
    for prompt in PROMPTS:
        ids = pair.prompt_ids(prompt, chat=False)
        result = pair.generate(prompt_ids=ids, max_new_tokens=40, chat=False, ignore_eos=True, **CASES[case])
        expected, _ = reference.greedy(ids, 40)
        assert result.token_ids == expected, (case, prompt)
        accepted += result.stats.accepted
        rejections += result.stats.rejections
    if case not in ("none", "draft, cost model"):
        assert accepted > 0 and rejections > 0, (accepted, rejections)


@pytest.mark.parametrize("strategy", ["lookup", "draft"])
def test_trees_are_refused_on_llama_cpp_in_one_line(pair, strategy):
    """A tree's kept cells sit out of position order in llama.cpp's KV buffer, so attention over them
    rounds unlike plain decoding (the bench found outputs that left it): refused, naming the fix."""
    with pytest.raises(UsageError, match="--tree does not run on the llama.cpp engine.*\n.*--engine torch"):
        pair.generate("def f(x):", max_new_tokens=4, strategy=strategy, tree=8)
    assert pair.generate("def f(x):", max_new_tokens=4, strategy="none", tree=8).token_ids  # ignored


def test_a_batch_scores_each_position_as_one_token_steps_do(pair):
    """A forward of n tokens gives each position the logits n one-token forwards give (the build and
    context settings the engine uses): equal argmax, logits within float rounding."""
    lm = pair.target
    ids = torch.tensor(pair.prompt_ids(PROMPTS[0], chat=False))
    one = lm.new_cache()
    lm.forward(ids[:4], one, last_only=True)
    steps = torch.stack([lm.forward(ids[i : i + 1], one)[0].clone() for i in range(4, len(ids))])
    batched = lm.new_cache()
    lm.forward(ids[:4], batched, last_only=True)
    block = lm.forward(ids[4:], batched).clone()
    assert torch.equal(block, steps)  # bitwise: the build and context settings make it so


def requantized_lm(ggufs, tmp_path_factory, ftype: str):
    """The tiny target requantized by llama.cpp to `ftype`, under the engine."""
    from specli.models.llama_cpp.lm import LlamaLM, LlamaModel

    path = requantized(ggufs["tiny-target"], tmp_path_factory.mktemp(ftype.lower()), ftype)
    return LlamaLM(LlamaModel(path, path.name, None))


@pytest.fixture(scope="module")
def kquant_lm(ggufs, tmp_path_factory):
    """The tiny target requantized by llama.cpp to Q4_K_M (its K-quant matmuls have a tiled batch path)."""
    return requantized_lm(ggufs, tmp_path_factory, "Q4_K_M")


@pytest.mark.parametrize("n", [2, 8, 17])
def test_a_k_quant_batch_is_bitwise_one_token_steps(kquant_lm, n):
    """Q4_K weights, a verify of n tokens: the very logits of n one-token steps. ggml's tiled K-quant
    matmul (batches of 8 rows or more) rounds differently; the engine turns it off (GGML_CPU_TILED_MM)."""
    lm = kquant_lm
    ids = torch.arange(3, 3 + 24 + n)
    one = lm.new_cache()
    lm.forward(ids[:24], one, last_only=True)
    steps = torch.stack([lm.forward(ids[i : i + 1], one)[0].clone() for i in range(24, 24 + n)])
    batched = lm.new_cache()
    lm.forward(ids[:3], batched, last_only=True)  # a different prefix: nothing is reused
    lm.forward(ids[3:24], batched, last_only=True)
    assert torch.equal(lm.forward(ids[24:], batched).clone(), steps)


def test_a_rewind_leaves_what_a_fresh_cache_computes(pair):
    lm = pair.target
    ids = torch.tensor(pair.prompt_ids(PROMPTS[1], chat=False))
    cache = lm.new_cache()
    lm.forward(ids[:6], cache)
    lm.forward(torch.tensor([5, 9, 11]), cache)
    lm.rewind(cache, 3)
    assert lm.cache_length(cache) == 6
    after = lm.forward(ids[6:9], cache).clone()
    fresh = lm.new_cache()
    lm.forward(ids[:6], fresh)
    expected = lm.forward(ids[6:9], fresh).clone()
    assert torch.allclose(after, expected, atol=1e-4)


def test_a_prompt_sharing_the_last_ones_prefix_reuses_its_positions(pair, reference):
    """The next generation's prefill keeps the positions whose tokens the previous generation held (as
    llama-server's prompt cache does) where prefills of every size round alike (the rule's `shared`, as
    on the documented build; where prefill-sized batches round apart nothing is reused), and the output
    is still the one-token reference's."""
    ids = pair.prompt_ids(PROMPTS[1], chat=False)
    pair.generate(prompt_ids=ids, max_new_tokens=8, strategy="none")
    longer = ids + pair.prompt_ids(" jumps", chat=False)
    result = pair.generate(prompt_ids=longer, max_new_tokens=16, strategy="lookup", ignore_eos=True)
    # the whole earlier prompt (its generated tokens differ), where reuse is exact
    assert pair.target.reused == (len(ids) if pair.target.rule.shared else 0)
    assert result.token_ids == reference.greedy(longer, 16)[0]
    other = pair.prompt_ids("import os", chat=False)
    pair.generate(prompt_ids=other, max_new_tokens=4, strategy="none")
    assert pair.target.reused < 2
    pair.forget_prompts()  # what bench does before every run: the same prompt prefills again
    pair.generate(prompt_ids=other, max_new_tokens=4, strategy="none")
    assert pair.target.reused == 0


def test_a_tree_forward_gives_each_node_its_own_paths_logits(pair):
    """One masked forward over a tree (root, two children, a grandchild under each) equals, node by node,
    a chain forward of that node's own path; keep() leaves exactly that path in the cache."""
    lm = pair.target
    prefix = pair.prompt_ids(PROMPTS[2], chat=False)
    tokens = [prefix[-1], 7, 8, 9, 10]
    parents = [-1, 0, 0, 1, 2]  # node 0 is the root (pending); 1, 2 children; 3 under 1, 4 under 2
    depth = [0, 1, 1, 2, 2]
    cache = lm.new_cache()
    lm.forward(torch.tensor(prefix[:-1]), cache, last_only=True)
    length = lm.cache_length(cache)
    visible = torch.zeros(5, length + 5, dtype=torch.bool)
    visible[:, :length] = True
    for node in range(5):
        at = node
        while at >= 0:
            visible[node, length + at] = True
            at = parents[at]
    positions = torch.tensor([length + d for d in depth])
    logits, _ = lm.forward_masked(torch.tensor(tokens), cache, positions, visible)
    logits = logits.clone()
    for node in range(5):
        path, at = [], node
        while at >= 0:
            path.insert(0, tokens[at])
            at = parents[at]
        chain = lm.new_cache()
        lm.forward(torch.tensor(prefix[:-1]), chain, last_only=True)
        expected = lm.forward(torch.tensor(path), chain)[-1]
        # a node's own cell sits past its masked siblings', so sgemm's lanes sum attention's cells in
        # another order than the chain's: equal up to rounding (measured 1.8e-4; a wrong mask: > 0.1)
        assert torch.allclose(logits[node], expected, atol=1e-3), node
    # keep the path root -> 2 -> 4: the cache then continues as a chain over those tokens
    cache = lm.new_cache()
    lm.forward(torch.tensor(prefix[:-1]), cache, last_only=True)
    lm.forward_masked(torch.tensor(tokens), cache, positions, visible)
    lm.keep(cache, 5, [0, 2, 4])
    assert lm.cache_length(cache) == length + 3
    after = lm.forward(torch.tensor([11]), cache)[0].clone()
    chain = lm.new_cache()
    lm.forward(torch.tensor(prefix[:-1]), chain, last_only=True)
    expected = lm.forward(torch.tensor([tokens[0], 8, 10, 11]), chain)[-1]
    # the kept cells sit where the tree put them, so attention sums over them in another order: equal up
    # to float rounding (measured 3e-4 here), never a different top token
    assert int(after.argmax()) == int(expected.argmax())
    assert torch.allclose(after, expected, atol=2e-3)


# --------------------------------------------------------------------------- sampling

RUNS = 1500
TOP_K = 3


def _exact_joint(
    reference: Reference, prompt: list[int], cfg: SamplingConfig
) -> dict[tuple[int, int], float]:
    """P(t1, t2) over the top-k support, from llama.cpp's own one-token logits, processed as the engine
    processes them (temperature, top-k)."""
    first = process_logits(torch.from_numpy(reference.next_logits(prompt)), cfg)
    joint = {}
    for a in torch.nonzero(first).flatten().tolist():
        second = process_logits(torch.from_numpy(reference.next_logits(prompt + [a])), cfg)
        for b in torch.nonzero(second).flatten().tolist():
            joint[(a, b)] = float(first[a] * second[b])
    return joint


def _empirical(pair, drafter, prompt: list[int], cfg: SamplingConfig) -> tuple[dict, float]:
    counts: dict[tuple[int, int], int] = {}
    drafted = accepted = 0
    for seed in range(RUNS):
        config = EngineConfig(max_new_tokens=2, num_draft_tokens=2, fixed_k=True, sampling=cfg, seed=seed)
        rounds = list(generate_rounds(pair.target, drafter, prompt, config, StopCriteria(set())))
        tokens = tuple(t for r in rounds for t in r.committed)
        counts[tokens] = counts.get(tokens, 0) + 1
        drafted += sum(len(r.drafted) for r in rounds)
        accepted += sum(r.accepted for r in rounds)
    return counts, accepted / max(drafted, 1)


def _pvalue(counts: dict, joint: dict) -> float:
    assert set(counts) <= set(joint), "a pair of tokens the target can never produce was produced"
    keys = sorted(joint)
    observed = torch.tensor([float(counts.get(key, 0)) for key in keys])
    probs = torch.tensor([joint[key] for key in keys])
    return g_test_pvalue(observed, probs / probs.sum())


def test_sampling_keeps_the_targets_distribution_and_a_biased_drafter_fails(pair, reference):
    """The first two tokens' joint distribution (temperature 1.5, top-k 3: a small support the drafter
    often disagrees on) matches the target's exact one; the classic bug (draft the argmax, report the
    softmax as q) fails the same test."""
    cfg = SamplingConfig(1.5, top_k=TOP_K)
    prompt = pair.prompt_ids("The quick brown", chat=False)
    joint = _exact_joint(reference, prompt, cfg)
    vocab = pair.target.vocab_size
    drafter = DraftModelDrafter(pair.draft, vocab)
    counts, acceptance = _empirical(pair, drafter, prompt, cfg)
    assert 0.1 < acceptance < 0.95, acceptance
    assert _pvalue(counts, joint) > 1e-3
    biased = GreedyDraftReportingSoftmax(pair.draft, vocab)
    counts, _ = _empirical(pair, biased, prompt, cfg)
    assert _pvalue(counts, joint) < 1e-6


# --------------------------------------------------------------------------- blockwise heads


@pytest.fixture(scope="module")
def heads_pair(ggufs):
    """The tiny target's GGUF on llama.cpp with the shipped sequential heads (embedded:tiny-heads)."""
    return specli.load(
        target=str(ggufs["tiny-target"]), draft="embedded:tiny-heads", strategy="heads", engine="llama.cpp",
        threads=1,
    )  # fmt: skip


def test_heads_draft_on_llama_cpp_and_the_output_is_its_own_decoding(heads_pair, reference):
    """Blockwise heads read the final hidden state llama.cpp returns beside the logits: the output is the
    one-token reference's, drafts are kept and refused, and with k fixed they keep as many drafts as the
    same heads do on the torch engine (the states agree up to rounding; rows taken from the wrong
    position, or a stale state, would keep far fewer). Trees stay refused on this engine."""
    assert heads_pair.engine == "llama.cpp"
    on_torch = specli.load(strategy="heads", threads=1)  # the embedded pair: the same target and heads
    fixed = {"max_new_tokens": 40, "ignore_eos": True, "fixed_k": True, "num_draft_tokens": 4}
    accepted = rejections = torch_accepted = 0
    for prompt in PROMPTS:
        ids = heads_pair.prompt_ids(prompt, chat=False)
        result = heads_pair.generate(prompt_ids=ids, chat=False, **fixed)
        assert result.token_ids == reference.greedy(ids, 40)[0], prompt
        assert result.stats.strategy == "heads" and result.stats.drafted > 0
        accepted += result.stats.accepted
        rejections += result.stats.rejections
        torch_accepted += on_torch.generate(prompt_ids=ids, chat=False, **fixed).stats.accepted
    assert rejections > 0 and accepted > 0
    assert abs(accepted - torch_accepted) <= 0.1 * torch_accepted, (accepted, torch_accepted)
    with pytest.raises(UsageError, match="--tree does not run on the llama.cpp engine"):
        heads_pair.generate("def f(x):", max_new_tokens=4, tree=8)


def test_forward_features_are_the_final_hidden_states_and_leave_the_logits_alone(heads_pair):
    """forward_features gives transformers' last hidden state (after the final norm) of the rows it
    scores: a prefill's last row only, a verify's every row; the logits are the plain forward's, bit for
    bit, and embeddings are off again afterwards. Inner layers: one line naming --engine torch."""
    from transformers import AutoModelForCausalLM

    from specli.errors import SpecliError

    lm = heads_pair.target
    ids = torch.tensor(heads_pair.prompt_ids(PROMPTS[0], chat=False))
    model = AutoModelForCausalLM.from_pretrained(embedded_model("tiny-target"), dtype=torch.float32)
    with torch.no_grad():
        hidden = model(ids[None], output_hidden_states=True).hidden_states[-1][0]  # [n, H]
    cache = lm.new_cache()
    logits, first = lm.forward_features(ids[:-3], cache, (lm.depth,), last_only=True)
    assert logits.shape == (1, lm.vocab_size) and first.shape == (1, hidden.shape[1])
    torch.testing.assert_close(first[0], hidden[-4], atol=1e-2, rtol=0)
    logits, rows = lm.forward_features(ids[-3:], cache, (lm.depth,))
    logits = logits.clone()
    assert logits.shape == (3, lm.vocab_size)
    torch.testing.assert_close(rows, hidden[-3:], atol=1e-2, rtol=0)
    plain = lm.new_cache()
    lm.forward(ids[:-3], plain, last_only=True)
    assert torch.equal(lm.forward(ids[-3:], plain), logits)
    lm.forward_features(ids[:1], plain, (lm.depth,))
    lm.forget()  # a whole prefill next, not a reuse of these cells
    again = lm.forward(ids, lm.new_cache(), last_only=True)  # with embeddings on, row 0 would be the first
    torch.testing.assert_close(again[0], logits[-1], atol=1e-4, rtol=0)
    with pytest.raises(SpecliError, match="no hidden states of inner layers"):
        lm.forward_features(ids[:2], lm.new_cache(), (1,))


def test_the_file_gives_torch_its_lm_head_and_embedding(heads_pair):
    """The heads' LM head and token embedding are the GGUF's own tensors, dequantized (tied here)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(embedded_model("tiny-target"), dtype=torch.float32)
    gguf_model = heads_pair.target_model
    head, embedding = gguf_model.get_output_embeddings(), gguf_model.get_input_embeddings()
    torch.testing.assert_close(head.weight, model.get_output_embeddings().weight)
    torch.testing.assert_close(embedding.weight, model.get_input_embeddings().weight)
    assert gguf_model.get_output_embeddings() is head  # dequantized once


# --------------------------------------------------------------------------- choosing the engine


def test_auto_picks_llama_cpp_for_a_gguf_target_only():
    assert engines.choose("auto", gguf_target=True, strategies=["lookup"], installed=True) == "llama.cpp"
    assert engines.choose("auto", gguf_target=False, strategies=["lookup"], installed=True) == "torch"
    assert engines.choose("auto", gguf_target=True, strategies=["lookup"], installed=False) == "torch"
    assert engines.choose("auto", gguf_target=True, strategies=["none", "eagle"], installed=True) == "torch"
    assert engines.choose("auto", gguf_target=True, strategies=["heads"], installed=True) == "llama.cpp"
    assert engines.choose("llama-cpp", gguf_target=True, strategies=["draft"], installed=True) == "llama.cpp"
    with pytest.raises(UsageError, match="needs llama-cpp-python.*\n.*pip install"):
        engines.choose("llama.cpp", gguf_target=True, strategies=["none"], installed=False)
    with pytest.raises(UsageError, match="runs GGUF files"):
        engines.choose("llama.cpp", gguf_target=False, strategies=["none"], installed=True)
    for strategy in ("eagle", "self"):
        with pytest.raises(
            UsageError, match=f"strategy '{strategy}' does not run on the llama.cpp.*\n.*torch"
        ):
            engines.choose("llama.cpp", gguf_target=True, strategies=[strategy], installed=True)
    with pytest.raises(UsageError, match="unknown engine"):
        engines.check_engine("vulkan")


def test_auto_loads_a_gguf_on_llama_cpp_and_dtype_keeps_torch(ggufs):
    llama = specli.load(target=str(ggufs["tiny-target"]), strategy="lookup", threads=1)
    assert llama.engine == "llama.cpp"
    torch_pair = specli.load(target=str(ggufs["tiny-target"]), strategy="lookup", dtype="float32", threads=1)
    assert torch_pair.engine == "torch"
    # lookup's own k follows the engine: llama.cpp splits verifies past 17 rows (its row rule)
    assert llama.settings().num_draft_tokens == LOOKUP_DRAFT_TOKENS_LLAMA
    assert torch_pair.settings().num_draft_tokens == LOOKUP_DRAFT_TOKENS
    with pytest.raises(UsageError, match="--dtype is for the torch engine"):
        specli.load(target=str(ggufs["tiny-target"]), engine="llama.cpp", dtype="float32")


def test_a_transformers_drafter_is_written_once_as_gguf(ggufs, monkeypatch, tmp_path, reference):
    """An embedded drafter (a transformers folder) drafts on llama.cpp from the GGUF specli writes of it
    into its cache, once; the output is still the target's own."""
    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path))
    pair = specli.load(target=str(ggufs["tiny-target"]), draft="embedded:tiny-draft", engine="llama.cpp")
    written = list((tmp_path / "llama-gguf").glob("*.gguf"))
    assert len(written) == 1 and pair.draft_model.path == written[0]
    ids = pair.prompt_ids(PROMPTS[0], chat=False)
    result = pair.generate(prompt_ids=ids, max_new_tokens=24, ignore_eos=True, fixed_k=True)
    assert result.stats.drafted > 0
    assert result.token_ids == reference.greedy(ids, 24)[0]
    mtime = written[0].stat().st_mtime_ns
    specli.load(target=str(ggufs["tiny-target"]), draft="embedded:tiny-draft", engine="llama.cpp")
    assert written[0].stat().st_mtime_ns == mtime


# --------------------------------------------------------------------------- the command line


def test_generate_json_names_the_engine(ggufs):
    result = CliRunner().invoke(
        app,
        ["generate", "def f(x):", "--target", str(ggufs["tiny-target"]), "--engine", "llama.cpp",
         "--strategy", "lookup", "--max-new-tokens", "8", "--json", "--threads", "1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["stats"]["engine"] == "llama.cpp"


def test_eagle_on_llama_cpp_is_one_line_naming_torch(ggufs):
    result = CliRunner().invoke(
        app,
        ["generate", "hi", "--target", str(ggufs["tiny-target"]), "--engine", "llama.cpp",
         "--strategy", "self", "--max-new-tokens", "4"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "does not run on the llama.cpp engine" in result.output and "--engine torch" in result.output
    assert "Traceback" not in result.output


def test_without_the_package_the_refusal_names_the_install(ggufs, monkeypatch):
    monkeypatch.setattr("specli.models.llama_cpp.library.available", lambda: False)
    result = CliRunner().invoke(
        app, ["generate", "hi", "--target", str(ggufs["tiny-target"]), "--engine", "llama.cpp"]
    )
    assert result.exit_code == 2
    assert "pip install" in result.output and "llama" in result.output
    assert "Traceback" not in result.output


def test_a_gguf_llama_cpp_cannot_read_is_one_line_and_leaves_nothing(ggufs, tmp_path, monkeypatch):
    """A file whose header reads but whose tensors are cut short: llama.cpp refuses it; one line naming
    the file and --engine torch, exit 1, and the probe records no success for it."""
    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path / "cache"))
    data = ggufs["tiny-target"].read_bytes()
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(data[: len(data) // 2])
    result = CliRunner().invoke(
        app, ["generate", "hi", "--target", str(bad), "--engine", "llama.cpp", "--max-new-tokens", "4"]
    )
    assert result.exit_code in (1, 2), result.output
    assert "cut.gguf" in result.output
    assert "Traceback" not in result.output
    assert not list((tmp_path / "cache").glob("llama-probe/*"))
    assert not list((tmp_path / "cache").glob("gguf/*"))  # the config and tokenizer it read: gone


def test_a_backend_that_crashes_is_one_line_naming_the_rebuild(ggufs, tmp_path, monkeypatch):
    """The probe's child dies of SIGILL (an instruction the CPU lists but traps): the load is one
    ModelLoadError naming the signal and the rebuild, not a dead process; no success is recorded."""
    import signal

    from specli.errors import ModelLoadError
    from specli.models.llama_cpp import probe

    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(probe, "_CHILD", f"import os; os.kill(os.getpid(), {int(signal.SIGILL)})")
    with pytest.raises(ModelLoadError) as caught:
        probe.check_runs(ggufs["tiny-target"], "tiny.gguf", 1)
    message = str(caught.value)
    assert "SIGILL" in message and "tiny.gguf" in message and "CMAKE_ARGS" in message
    assert "--engine torch" in message and len(message.splitlines()) == 2
    assert not list(tmp_path.glob("llama-probe/*"))


def test_verify_timings_are_kept_for_the_next_process(pair, tmp_path, monkeypatch):
    """The cost model's prior (a forward of each VERIFY_LENGTHS size, timed) is measured once per file,
    build, thread count and rule and kept in specli's cache: a fresh engine over the same file reads it
    without a forward (a CLI run would otherwise time ~40 forwards before its first token); under
    another rule it times them again."""
    from dataclasses import replace

    from specli.models.llama_cpp.lm import VERIFY_LENGTHS, LlamaLM

    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path))
    timed = LlamaLM(pair.target.model).verify_costs()
    assert set(timed) == set(VERIFY_LENGTHS) and all(seconds > 0 for seconds in timed.values()), timed
    fresh = LlamaLM(pair.target.model)
    monkeypatch.setattr(fresh, "forward", None)  # a forward would fail the call
    assert fresh.verify_costs() == timed
    other = LlamaLM(pair.target.model)
    other.rule = replace(other.rule, most=9)
    assert set(other.verify_costs()) == set(VERIFY_LENGTHS)
    assert len(list(tmp_path.glob("llama-probe/*-costs.json"))) == 2


def test_q8_0_products_take_sgemm_from_where_it_is_as_fast_at_every_size():
    """`q8_rows` (from which row count Q8_0 batches take llamafile's sgemm) from forwards timed with every
    batch through sgemm and through ggml's dot products: the fewest timed rows from which sgemm is as
    fast at every larger size too; prompts only (32) where the dot products win the largest."""
    from specli.models.llama_cpp.lm import DOT_ROWS, q8_rows

    sizes = (1, 2, 3, 5, 9, 17)
    # AMD EPYC Zen 5, 1 thread, Gemma 3 270M (ms): the dot products win up to 9 rows, sgemm at 17
    sgemm = dict(zip(sizes, (12.1, 39.1, 47.9, 81.8, 98.6, 123.8), strict=True))
    dots = dict(zip(sizes, (12.1, 22.7, 29.5, 45.5, 72.8, 139.2), strict=True))
    assert q8_rows(sgemm, dots) == 17
    faster = {n: seconds / 2 for n, seconds in dots.items()}
    assert q8_rows(faster, dots) == 2  # sgemm faster everywhere
    assert q8_rows(faster, {**faster, 9: 30.0}) == 17  # ties go to sgemm; it lost at 9: from 17 on
    assert q8_rows(sgemm, {**dots, 17: 100.0}) == DOT_ROWS  # the dot products win the largest
    assert q8_rows({**faster, 5: 50.0}, dots) == 9  # sgemm lost at 5: from 9 on, where it wins throughout


@pytest.fixture(scope="module")
def q8_lm(ggufs, tmp_path_factory):
    """The tiny target requantized by llama.cpp to Q8_0 (the real models' tied LM heads are Q8_0)."""
    return requantized_lm(ggufs, tmp_path_factory, "Q8_0")


@pytest.mark.parametrize("n", [2, 8, 17])
def test_a_q8_0_batch_is_bitwise_one_token_steps_through_either_kernel(q8_lm, n):
    """Q8_0 weights, a verify of n tokens, with the engine's switch at every batch through sgemm and at
    every batch through the dot products (a step takes the dot products): the very logits of n
    one-token steps, the switch set in the process's environment as the forward runs."""
    import os

    from specli.models.llama_cpp.library import Q8_ROWS, library
    from specli.models.llama_cpp.lm import DOT_ROWS, SGEMM_ROWS

    lm = q8_lm
    ids = torch.arange(5, 5 + 24 + n)
    for rows in (SGEMM_ROWS, DOT_ROWS):
        lm.q8_rows = rows
        one = lm.new_cache()
        lm.forward(ids[:24], one, last_only=True)
        steps = torch.stack([lm.forward(ids[i : i + 1], one)[0].clone() for i in range(24, 24 + n)])
        batched = lm.new_cache()
        lm.forward(ids[:3], batched, last_only=True)  # a different prefix: nothing is reused
        lm.forward(ids[3:24], batched, last_only=True)
        assert torch.equal(lm.forward(ids[24:], batched).clone(), steps), rows
        if library().user_q8_rows is None:
            assert os.environ[Q8_ROWS] == str(rows)


def test_a_q8_0_file_is_timed_under_both_kernels_and_the_choice_is_kept(q8_lm, tmp_path, monkeypatch):
    """verify_costs on a file with Q8_0 matrices times its forwards under each kernel, keeps the faster
    one's row count with the timings (a fresh engine reads both without a forward) and sets it for its
    forwards; where the user set the switch it times once and leaves it alone."""
    from specli.models.llama_cpp.library import library
    from specli.models.llama_cpp.lm import DOT_ROWS, VERIFY_LENGTHS, LlamaLM

    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(library(), "user_q8_rows", None)
    lm = LlamaLM(q8_lm.model)
    calls = []
    timed_once = lm._time_forwards
    monkeypatch.setattr(lm, "_time_forwards", lambda threads: calls.append(lm.q8_rows) or timed_once(threads))
    seconds = lm.verify_costs()
    assert calls == [2, DOT_ROWS] and lm.q8_rows in (*VERIFY_LENGTHS[1:], DOT_ROWS), (calls, lm.q8_rows)
    assert set(seconds) == set(VERIFY_LENGTHS)
    fresh = LlamaLM(q8_lm.model)
    monkeypatch.setattr(fresh, "forward", None)  # a forward would fail the call
    assert fresh.verify_costs() == seconds and fresh.q8_rows == lm.q8_rows
    monkeypatch.setattr(library(), "user_q8_rows", "5")
    monkeypatch.setenv("SPECLI_CACHE_DIR", str(tmp_path / "user"))
    chosen = LlamaLM(q8_lm.model)
    calls.clear()
    monkeypatch.setattr(chosen, "_time_forwards", lambda threads: calls.append(chosen.q8_rows) or {})
    chosen._time_kernels(1)
    assert calls == [None] and chosen.q8_rows is None
