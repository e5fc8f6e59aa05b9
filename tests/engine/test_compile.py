"""Static KV caches and `--compile` (docs/design.md §12).

CPU: a static cache (rewound by position) gives the target's own greedy output and, seeded at fixed k, the
same samples as the dynamic-cache path, for none, draft and lookup (and eagle); its tracked length is the
committed context after every round. The compiled dispatch runs under dynamo with its eager backend (fast:
tracing, guards and recompiles are real, code generation is not); inductor itself runs in a slow test.
Refusals: strategy self and sliding-window models, exit 2 with the reason. GPU tests (marked gpu): the
real thing, CUDA graphs included, against transformers' generate().
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import make_model, save_model
from typer.testing import CliRunner

import specli
from specli.cli import app
from specli.errors import UsageError
from specli.models.cached_lm import CachedLM
from specli.models.static_cache import StaticKV, capacity_for, static_cache_problem
from specli.pair import Pair

PROMPTS = ["def fibonacci(n):", "import os\nfor i in range(10):\n    print("]
N = 21  # tokens per generation
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def reference(model, prompt_ids: list[int], n: int) -> list[int]:
    """The target's own greedy generate() (no EOS: the configs have none)."""
    ids = torch.tensor([prompt_ids], device=model.device)
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, pad_token_id=0
    )
    return out[0, len(prompt_ids) :].tolist()


def handles(lm: CachedLM) -> list[StaticKV]:
    """Every cache `lm` hands out from now on (the engine's and the drafter's are internal)."""
    seen: list[StaticKV] = []
    original = lm.new_cache

    def new_cache():
        seen.append(original())
        return seen[-1]

    lm.new_cache = new_cache
    return seen


def static_twin(pair: Pair, capacity: int = 16) -> Pair:
    """The same models over static caches (no compile), starting small so `reserve` must grow them."""
    twin = Pair(pair.target_model, pair.tokenizer, pair.draft_model, strategy=pair.strategy, head=pair.head)
    twin.target = CachedLM(pair.target_model, static_length=capacity)
    if pair.draft_model is not None:
        twin.draft = CachedLM(pair.draft_model, static_length=capacity)
    twin.eos_ids = set(pair.eos_ids)
    return twin


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def pairs(request, tmp_path_factory, tokenizer):
    """(dynamic pair, the same models over static caches) for one architecture; a different drafter, so
    drafts are rejected and every rewind runs, and no EOS."""
    root = tmp_path_factory.mktemp(f"compile-{request.param}")
    vocab = len(tokenizer)
    target = save_model(
        root / "t", make_model(request.param, vocab, layers=3, seed=11, eos_token_id=None), tokenizer
    )
    draft = save_model(
        root / "d", make_model(request.param, vocab, layers=1, seed=12, eos_token_id=None), tokenizer
    )
    dynamic = specli.load(target=str(target), draft=str(draft), device="cpu", threads=None)
    dynamic.eos_ids = set()
    return dynamic, static_twin(dynamic)


def stream_checked(pair: Pair, ids: list[int], **settings) -> tuple[list[int], list]:
    """Generate through `stream`, checking after every round that the target's static cache holds exactly
    the committed context (every committed token but the pending last one) and that every layer agrees,
    and that the drafter's cache is in step too."""
    target_caches, draft_caches = handles(pair.target), handles(pair.draft) if pair.draft else []
    tokens, rounds = [], []
    for r in pair.stream(prompt_ids=ids, **settings):
        tokens += r.committed
        rounds.append(r)
        cache = target_caches[-1]
        assert cache.length == len(ids) + len(tokens) - 1, (r.index, cache.length)
        cache.check()  # every layer's own position equals the tracked length
        if draft_caches:
            draft_caches[-1].check()
            assert draft_caches[-1].length <= len(ids) + len(tokens)
    assert len(target_caches) == 1
    return tokens, rounds


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("strategy", ["none", "draft", "lookup"])
def test_static_cache_greedy_equals_generate(pairs, strategy, k):
    dynamic, static = pairs
    rejected = 0
    for prompt in PROMPTS:
        ids = static.encode(prompt, chat=False)
        expected = reference(static.target_model, ids, N)
        tokens, rounds = stream_checked(
            static, ids, max_new_tokens=N, num_draft_tokens=k, fixed_k=True, strategy=strategy
        )
        assert tokens == expected, (strategy, k, prompt)
        rejected += sum(len(r.drafted) - r.accepted for r in rounds)
        capacity = static.target.static_capacity
        assert capacity >= len(ids) + N + k + 1 and capacity == capacity_for(capacity) > 16  # grown
    if strategy == "draft":
        assert rejected > 0  # rewinds by position really ran


@pytest.mark.parametrize("strategy", ["none", "draft", "lookup"])
def test_static_cache_samples_equal_the_dynamic_path(pairs, strategy):
    """Seeded sampling at fixed k: the static path draws the same tokens, round for round."""
    dynamic, static = pairs
    ids = static.encode(PROMPTS[0], chat=False)
    settings = dict(max_new_tokens=N, num_draft_tokens=3, fixed_k=True, temperature=0.9, seed=5)
    want = dynamic.generate(prompt_ids=ids, strategy=strategy, **settings)
    got, rounds = stream_checked(static, ids, strategy=strategy, **settings)
    assert got == want.token_ids
    assert [r.accepted for r in rounds] == [r.accepted for r in want.rounds]


def test_draft_equal_to_the_target_accepts_everything_over_static_caches(pairs):
    """Full acceptance: the drafter's pending holds two tokens (d_k and the bonus) every round."""
    dynamic, _ = pairs
    same = Pair(dynamic.target_model, dynamic.tokenizer, dynamic.target_model, strategy="draft")
    same = static_twin(same)
    ids = same.encode(PROMPTS[1], chat=False)
    tokens, rounds = stream_checked(same, ids, max_new_tokens=20, num_draft_tokens=4, fixed_k=True)
    assert tokens == reference(same.target_model, ids, 20)
    assert [(len(r.drafted), r.accepted) for r in rounds] == [(4, 4)] * 4


def test_rewind_moves_the_position_and_the_next_forward_overwrites(tokenizer):
    model = make_model("llama", len(tokenizer), layers=2, seed=3)
    static, dynamic = CachedLM(model, static_length=32), CachedLM(model)
    s, d = static.new_cache(), dynamic.new_cache()
    torch.manual_seed(0)
    for n, back in [(7, 0), (4, 3), (2, 2), (5, 1), (1, 0), (3, 3)]:
        ids = torch.randint(0, len(tokenizer), (n,))
        torch.testing.assert_close(static.forward(ids, s), dynamic.forward(ids, d), rtol=1e-4, atol=1e-5)
        static.rewind(s, back)
        dynamic.rewind(d, back)
        assert s.length == d.get_seq_length()
        s.check()
    with pytest.raises(ValueError):
        static.rewind(s, s.length + 1)


def test_one_generation_at_a_time_and_no_overflow(tokenizer):
    model = make_model("llama", len(tokenizer), layers=1, seed=3)
    lm = CachedLM(model, static_length=8)
    old = lm.new_cache()
    lm.forward(torch.tensor([1, 2, 3]), old)
    new = lm.new_cache()  # the same StaticCache, back at position 0
    assert new.cache is old.cache and new.length == 0 and new.cache_lengths()[0] == 0
    with pytest.raises(RuntimeError, match="newer generation"):
        lm.forward(torch.tensor([4]), old)
    lm.forward(torch.arange(8), new)
    with pytest.raises(RuntimeError, match="overflow"):
        lm.forward(torch.tensor([1]), new)
    lm.reserve(9)  # grows: a new cache at the next power of two
    assert lm.static_capacity == 64 and lm.new_cache().cache is not new.cache


def test_the_drafters_shorter_context_restarts_over_its_static_cache(tmp_path, tokenizer):
    """A drafter whose context is shorter than the generation restarts its cache (a new handle mid-
    generation); output stays the target's."""
    vocab = len(tokenizer)
    target = make_model("llama", vocab, layers=2, seed=21, eos_token_id=None, max_positions=256)
    draft = make_model("llama", vocab, layers=1, seed=22, eos_token_id=None, max_positions=24)
    pair = static_twin(Pair(target, tokenizer, draft, strategy="draft"))
    pair.eos_ids = set()
    ids = pair.encode(PROMPTS[1], chat=False)
    result = pair.generate(prompt_ids=ids, max_new_tokens=30, num_draft_tokens=3, fixed_k=True)
    assert result.token_ids == reference(target, ids, 30)


def test_eagle_over_a_static_target_cache():
    """EAGLE reads the target's hidden states from the verify forward; over a static cache too."""
    dynamic = specli.load(strategy="eagle", draft="embedded:tiny-eagle3", device="cpu", threads=None)
    static = static_twin(dynamic, capacity=64)
    ids = dynamic.encode("def parse(line):", chat=False)
    expected = reference(dynamic.target_model, ids, 16)
    tokens, rounds = stream_checked(static, ids, max_new_tokens=16, num_draft_tokens=3, fixed_k=True)
    assert tokens == expected and sum(r.accepted for r in rounds) > 0


# --- the compiled path -----------------------------------------------------------------------------


@pytest.fixture
def dynamo_eager(monkeypatch):
    """torch.compile with dynamo's eager backend: real tracing, guards and recompiles, no codegen."""
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="eager", dynamic=False))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def counting(lm: CachedLM) -> list[int]:
    """Token counts of the forwards `lm` runs through its compiled call."""
    calls: list[int] = []
    compiled = lm._compiled

    def call(**kwargs):
        calls.append(kwargs["input_ids"].shape[1])
        return compiled(**kwargs)

    lm._compiled = call
    return calls


@pytest.mark.parametrize("lean", [False, True])
def test_compiled_pair_is_lossless_and_compiles_once(tiny_pair, dynamo_eager, lean):
    """lean=False: the draft model's compiled forward drafts; lean=True (the default): its lean step
    does, and only the target's forwards are compiled."""
    target_dir, draft_dir = tiny_pair
    pair = specli.load(
        target=str(target_dir), draft=str(draft_dir), device="cpu", threads=None, compile=True, lean=lean
    )
    assert pair.compile and pair.target.compiled and pair.draft.compiled
    assert pair.drafter_step() == ("lean" if lean else "compiled")
    target_calls, draft_calls = counting(pair.target), counting(pair.draft)
    ids = pair.encode(PROMPTS[0], chat=False)
    expected = reference(pair.target_model, ids, N)  # both stop at the tiny pair's EOS, if it comes
    for strategy in ("draft", "lookup", "none"):
        result = pair.generate(prompt_ids=ids, strategy=strategy, max_new_tokens=N, num_draft_tokens=2)
        assert result.token_ids == expected, strategy
    assert target_calls and max(target_calls) <= 3  # verifies of k+1 <= 3 tokens, compiled
    if lean:
        assert not draft_calls  # the lean step drafted
    else:
        assert draft_calls and max(draft_calls) <= 3
    from torch._dynamo.utils import counters

    frames = counters["stats"]["unique_graphs"]
    again = pair.generate(prompt_ids=ids, strategy="draft", max_new_tokens=N, num_draft_tokens=2)
    assert again.token_ids == expected
    assert counters["stats"]["unique_graphs"] == frames  # the reused static cache: nothing recompiled


def test_warm_up_builds_every_graph_the_rounds_use(tiny_pair, dynamo_eager):
    """After warm_up, no generation at settings up to k = 4 builds a graph: every verify length 1..k+1 (k
    chosen per round or fixed), the drafter's steps, plain steps. Fails when a length or a variant
    (the drafter's last-position steps, the verify's full logits) is left for the rounds to compile.
    lean=False: the draft model's compiled forward drafts (with its lean step, nothing of it compiles)."""
    from specli.models.static_cache import compiled_graphs

    target_dir, draft_dir = tiny_pair
    pair = specli.load(
        target=str(target_dir), draft=str(draft_dir), device="cpu", threads=None, compile=True, lean=False
    )
    ids = pair.encode(PROMPTS[1], chat=False)
    expected = reference(pair.target_model, ids, N)
    before = compiled_graphs()
    assert pair.warm_up(prompt_ids=ids, strategy="draft", num_draft_tokens=4, max_new_tokens=N) > 0
    assert compiled_graphs() > before  # the graphs were built here
    assert pair.warm_up(prompt_ids=ids, strategy="lookup", num_draft_tokens=4, max_new_tokens=N) == 0.0
    built = compiled_graphs()
    for strategy, k, fixed in [
        ("draft", 4, False),
        ("draft", 3, True),
        ("draft", 1, True),
        ("lookup", 4, False),
    ]:
        result = pair.generate(
            prompt_ids=ids, strategy=strategy, num_draft_tokens=k, fixed_k=fixed, max_new_tokens=N
        )
        assert result.token_ids == expected, (strategy, k)
    assert compiled_graphs() == built  # nothing compiled inside a generation
    assert pair.warm_up(prompt_ids=ids, strategy="draft", num_draft_tokens=4, max_new_tokens=N) == 0.0


def test_warm_up_builds_the_verify_with_hidden_states_for_eagle(dynamo_eager):
    from specli.models.static_cache import compiled_graphs

    pair = specli.load(
        strategy="eagle", draft="embedded:tiny-eagle3", device="cpu", threads=None, compile=True
    )
    ids = pair.encode("def parse(line):", chat=False)
    assert pair.warm_up(prompt_ids=ids, num_draft_tokens=3, max_new_tokens=16) > 0
    built = compiled_graphs()
    result = pair.generate(prompt_ids=ids, num_draft_tokens=3, max_new_tokens=16)
    assert result.token_ids == reference(pair.target_model, ids, 16)
    assert compiled_graphs() == built


def test_without_compile_warm_up_does_nothing(tiny_pair):
    pair = specli.load(target=str(tiny_pair[0]), draft=str(tiny_pair[1]), device="cpu", threads=None)
    assert pair.warm_up("def f():") == 0.0


def test_bench_times_no_compile_and_flags_a_run_that_did(tiny_pair, dynamo_eager, monkeypatch):
    """bench warms up outside its clock; a timed run that still compiled is flagged (no efficiency)."""
    from specli.bench import prompts as prompt_sets
    from specli.bench import run as b

    pair = specli.load(
        target=str(tiny_pair[0]), draft=str(tiny_pair[1]), device="cpu", threads=None, compile=True
    )
    prompt = prompt_sets.BenchPrompt("1", "c", PROMPTS[0])
    ids = pair.encode(prompt.text, chat=False)
    settings = b.BenchSettings(pair.settings(max_new_tokens=12, num_draft_tokens=3), warmup=0)
    assert not b.measure(pair, prompt, ids, "draft", settings, 0).compiled
    torch._dynamo.reset()  # the graphs are gone: a run that skips the warm-up compiles inside the clock
    monkeypatch.setattr(pair, "warm_up", lambda *a, **k: 0.0)
    monkeypatch.setattr(pair, "_warm_up", lambda *a, **k: 0)
    assert b.measure(pair, prompt, ids, "draft", settings, 0).compiled


def test_cli_reports_compile_time_apart(tiny_pair, dynamo_eager):
    """--compile: the compile is its own stage; tokens/s never include it (plain summary, --json)."""
    args = ["generate", "def f(x):", "--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1])]
    args += ["--device", "cpu", "--max-new-tokens", "8", "--threads", "1"]
    result = CliRunner().invoke(app, [*args, "--compile", "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)["stats"]
    assert stats["compile_time"] > 0
    assert stats["elapsed_s"] == pytest.approx(stats["tokens"] / stats["tokens_per_second"])
    plain = CliRunner().invoke(app, [*args, "--compile", "--view", "plain"])
    (summary,) = [line for line in plain.stderr.splitlines() if "tok/s" in line]
    assert re.search(r"compiled (in \d+\.\ds \(cached for next runs\)|forwards reused) · .* tok/s", summary)
    eager = CliRunner().invoke(app, [*args, "--json"])
    assert json.loads(eager.stdout)["stats"]["compile_time"] is None


@pytest.mark.slow
def test_inductor_compiled_greedy_equals_generate(tiny_pair):
    """The real torch.compile (inductor, mode "default" on CPU): a couple of minutes of compiling."""
    torch._dynamo.reset()
    target_dir, draft_dir = tiny_pair
    pair = specli.load(target=str(target_dir), draft=str(draft_dir), device="cpu", threads=None, compile=True)
    ids = pair.encode(PROMPTS[1], chat=False)
    expected = reference(pair.target_model, ids, N)
    result = pair.generate(prompt_ids=ids, max_new_tokens=N, num_draft_tokens=2, fixed_k=True)
    assert result.token_ids == expected


# --- refusals ----------------------------------------------------------------------------------------


def test_models_without_a_rewindable_static_cache_are_named(tokenizer):
    assert static_cache_problem(make_model("llama", len(tokenizer))) is None
    assert static_cache_problem(make_model("qwen2", len(tokenizer))) is None
    problem = static_cache_problem(make_model("mistral", len(tokenizer), sliding_window=16))
    assert "sliding-window" in problem and "16" in problem
    model = make_model("mistral", len(tokenizer), sliding_window=16)
    with pytest.raises(UsageError, match="--compile cannot run 'sw'.*sliding-window"):
        Pair(model, tokenizer, strategy="none", target_name="sw", compile=True)


def test_strategy_self_is_refused_before_weights_load(tiny_pair, monkeypatch):
    from specli.models import loading

    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(UsageError, match="strategy 'self'"):
        specli.load(target=str(tiny_pair[0]), strategy="self", device="cpu", compile=True)


def test_a_compiled_pair_refuses_self_in_its_settings(tiny_pair, dynamo_eager):
    pair = specli.load(target=str(tiny_pair[0]), strategy="lookup", device="cpu", threads=None, compile=True)
    with pytest.raises(UsageError, match="strategy 'self'"):
        pair.settings(strategy="self")


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_cli_refuses_self_with_compile():
    result = CliRunner().invoke(
        app, ["generate", "x", "--strategy", "self", "--compile", "--device", "cpu", "--max-new-tokens", "2"]
    )
    assert result.exit_code == 2
    (line,) = error_lines(result)
    assert "--compile does not support strategy 'self'" in line
    assert "Traceback" not in result.output


def test_cli_bench_refuses_self_among_its_strategies():
    result = CliRunner().invoke(
        app, ["bench", "--strategy", "lookup", "--strategy", "self", "--compile", "--device", "cpu"]
    )
    assert result.exit_code == 2
    (line,) = error_lines(result)
    assert "strategy 'self'" in line


def test_cli_refuses_a_sliding_window_model_with_compile(tmp_path, tokenizer):
    folder = save_model(tmp_path / "sw", make_model("mistral", len(tokenizer), sliding_window=16), tokenizer)
    args = ["generate", "x", "--target", str(folder), "--strategy", "none", "--device", "cpu"]
    result = CliRunner().invoke(app, [*args, "--compile", "--max-new-tokens", "2"])
    assert result.exit_code == 2
    (line,) = error_lines(result)
    assert "--compile cannot run" in line and "sliding-window" in line
    assert CliRunner().invoke(app, [*args, "--max-new-tokens", "2", "--view", "none"]).exit_code == 0


# --- CUDA ----------------------------------------------------------------------------------------------


def cuda_reference_check(pair: Pair, prompt: str, result_ids: list[int], n: int) -> None:
    """Equal to the target's own greedy generate() (both stop at EOS), or parted at a numerical near-tie
    of the target's top two (a k+1-token verify and a one-token step run different CUDA kernels)."""
    from test_gpu import assert_same_or_near_tie

    expected = reference(pair.target_model, pair.encode(prompt, chat=False), n)
    assert_same_or_near_tie(pair.target_model, pair.tokenizer, prompt, result_ids, expected)
    assert len(result_ids) == len(expected) or result_ids != expected[: len(result_ids)]


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("strategy", ["none", "draft", "lookup", "eagle"])
def test_embedded_pair_compiled_on_cuda(strategy):
    draft = "embedded:tiny-eagle3" if strategy == "eagle" else None
    pair = specli.load(strategy=strategy, draft=draft, device="cuda", compile=True)
    assert pair.target.compiled and pair.target.device.type == "cuda"
    for prompt in ["def fibonacci(n):", "class Stack:\n    def push(self"]:
        for fixed in (True, False):
            result = pair.generate(prompt, max_new_tokens=48, num_draft_tokens=4, fixed_k=fixed, chat=False)
            cuda_reference_check(pair, prompt, result.token_ids, 48)


@pytest.mark.gpu
@CUDA
def test_llama_pair_compiled_on_cuda(tiny_pair):
    target_dir, draft_dir = tiny_pair
    pair = specli.load(target=str(target_dir), draft=str(draft_dir), device="cuda", compile=True)
    caches = handles(pair.target)
    for strategy in ("none", "draft", "lookup"):
        for k in (1, 4):
            for prompt in PROMPTS:
                ids = pair.encode(prompt, chat=False)
                result = pair.generate(
                    prompt_ids=ids, strategy=strategy, max_new_tokens=40, num_draft_tokens=k, fixed_k=True
                )
                cuda_reference_check(pair, prompt, result.token_ids, 40)
                caches[-1].check()
                assert caches[-1].length == len(ids) + len(result.token_ids) - 1
