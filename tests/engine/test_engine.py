"""Greedy losslessness against transformers' own generate(), through the loading path users hit."""

from __future__ import annotations

import pytest
import torch
from conftest import OLD_SLIDING_CACHE, make_model, save_model

import specli
from specli.engine.events import StopReason, TokenKind
from specli.errors import SpecliError

ARCHS = ["llama", "qwen2", "gpt2", "mistral", "gemma", "opt"]
PROMPTS = ["def fibonacci(n):", "The quick brown fox", "import os\nfor i in range(10):\n    print("]


def reference(pair: specli.Pair, prompt_ids: list[int], max_new_tokens: int, eos: set[int]) -> list[int]:
    """The target's own greedy generate() with the same stopping rule."""
    out = pair.target_model.generate(
        torch.tensor([prompt_ids]),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=sorted(eos) or None,
        pad_token_id=0,
    )
    return out[0, len(prompt_ids) :].tolist()


@pytest.fixture(scope="module", params=ARCHS)
def arch_pairs(request, tmp_path_factory, tokenizer):
    """For one architecture: (target+other drafter pair, target+itself pair), no EOS in the config."""
    root = tmp_path_factory.mktemp(request.param)
    vocab = len(tokenizer)
    target = save_model(
        root / "t", make_model(request.param, vocab, layers=3, seed=11, eos_token_id=None), tokenizer
    )
    draft = save_model(
        root / "d", make_model(request.param, vocab, layers=1, seed=12, eos_token_id=None), tokenizer
    )
    other = specli.load(target=str(target), draft=str(draft), device="cpu")
    same = specli.load(target=str(target), draft=str(target), device="cpu")
    for p in (other, same):
        p.eos_ids = set()  # the tokenizer's EOS (id 0) is tested separately below
    return other, same


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_identity(arch_pairs, k):
    for pair in arch_pairs:
        for prompt in PROMPTS:
            ids = pair.encode(prompt, chat=False)
            expected = reference(pair, ids, 21, set())
            result = pair.generate(prompt_ids=ids, max_new_tokens=21, num_draft_tokens=k)
            assert result.token_ids == expected, (pair.draft_name, prompt, k)
            assert result.stats.tokens == 21 and result.stats.stop_reason is StopReason.MAX_NEW_TOKENS


def test_self_drafter_accepts_everything_and_earns_bonus_tokens(arch_pairs):
    _, same = arch_pairs
    result = same.generate(
        prompt_ids=same.encode(PROMPTS[0], chat=False), max_new_tokens=20, num_draft_tokens=3, fixed_k=True
    )
    assert result.stats.acceptance_rate == 1.0
    assert all(r.kind is TokenKind.BONUS for r in result.rounds)
    assert [len(r.committed) for r in result.rounds] == [4] * 5


@pytest.mark.parametrize("which", ["other", "same"])
@pytest.mark.parametrize("position", [0, 3, 6])
def test_eos_inside_the_draft_stops_there(arch_pairs, which, position):
    pair = arch_pairs[0] if which == "other" else arch_pairs[1]
    ids = pair.encode(PROMPTS[2], chat=False)
    free = reference(pair, ids, 20, set())
    eos = free[position]
    expected = reference(pair, ids, 20, {eos})
    assert expected[-1] == eos and len(expected) == free.index(eos) + 1
    pair.eos_ids = {eos}
    try:
        result = pair.generate(prompt_ids=ids, max_new_tokens=20, num_draft_tokens=4)
    finally:
        pair.eos_ids = set()
    assert result.token_ids == expected
    assert result.stats.stop_reason is StopReason.EOS
    assert result.rounds[-1].committed[-1] == eos


@pytest.mark.parametrize("max_new_tokens", [1, 2, 5, 7, 11])
def test_max_new_tokens_ending_mid_draft_never_overshoots(arch_pairs, max_new_tokens):
    for pair in arch_pairs:
        ids = pair.encode(PROMPTS[1], chat=False)
        result = pair.generate(prompt_ids=ids, max_new_tokens=max_new_tokens, num_draft_tokens=4)
        assert result.token_ids == reference(pair, ids, max_new_tokens, set())
        assert len(result.token_ids) == max_new_tokens
        assert all(len(r.drafted) <= 4 for r in result.rounds)


@pytest.mark.parametrize("lean", [True, False])
def test_one_target_forward_and_k_drafter_forwards_per_round(tiny_pair, lean):
    target_dir, draft_dir = tiny_pair
    pair = specli.load(target=str(target_dir), draft=str(draft_dir), device="cpu", lean=lean)
    pair.eos_ids = set()
    assert pair.drafter_step() == ("lean" if lean else "transformers (lean steps are off)")
    calls = {"target": [], "draft": []}
    hooks = [
        pair.target_model.register_forward_hook(
            lambda m, a, kw, o: calls["target"].append(kw["input_ids"].shape[1]), with_kwargs=True
        ),
        pair.draft_model.register_forward_hook(
            lambda m, a, kw, o: calls["draft"].append(kw["input_ids"].shape[1]), with_kwargs=True
        ),
    ]
    if lean:  # the drafter steps through specli's own forward: count those calls
        step = pair.lean_step(pair.draft_model)[0]
        own = step.forward
        step.forward = lambda ids, cache, **kw: calls["draft"].append(len(ids)) or own(ids, cache, **kw)
    try:
        prompt = pair.encode("def fibonacci(n):", chat=False)
        result = pair.generate(prompt_ids=prompt, max_new_tokens=30, num_draft_tokens=3)
        drafted = list(calls["draft"])
        calls["draft"].clear()  # a generation that never drafts (1 token: no room for one) runs no drafter
        pair.generate(prompt_ids=prompt, max_new_tokens=1, num_draft_tokens=3)
    finally:
        for h in hooks:
            h.remove()
    assert calls["draft"] == []
    assert calls["target"][-1] == len(prompt)  # the 1-token generation: one forward, the prompt's
    calls["target"] = calls["target"][:-1]  # the 30-token generation's
    calls["draft"] = drafted
    rounds = result.rounds
    assert len(calls["target"]) == len(rounds)  # one forward per round: the first one carries the prompt
    assert calls["target"][0] == len(prompt) + len(rounds[0].drafted) and rounds[0].drafted
    assert calls["target"][1:] == [len(r.drafted) + 1 for r in rounds[1:]]
    assert rounds[0].verify_time == 0 and rounds[0].prefill_time > 0  # its forward is the prompt's
    drafting_rounds = [r for r in rounds if r.drafted]
    assert len(calls["draft"]) == sum(len(r.drafted) for r in drafting_rounds)  # k per round, no prefill:
    assert calls["draft"][0] == len(prompt)  # the first draft runs the whole prompt (none ran before it)


def test_plain_decoding_is_one_bonus_token_per_round(tiny_pair):
    pair = specli.load(target=str(tiny_pair[0]), strategy="none", device="cpu")
    pair.eos_ids = set()
    ids = pair.encode("class Stack:", chat=False)
    result = pair.generate(prompt_ids=ids, max_new_tokens=12)
    assert result.token_ids == reference(pair, ids, 12, set())
    assert (
        result.stats.rounds == 12 and result.stats.drafted == 0 and result.stats.mean_acceptance_length == 1.0
    )
    assert {r.kind for r in result.rounds} == {TokenKind.BONUS}


def test_context_limit_stops_before_overflow(tmp_path, tokenizer):
    folder = save_model(
        tmp_path / "m",
        make_model("llama", len(tokenizer), layers=2, max_positions=24, eos_token_id=None),
        tokenizer,
    )
    pair = specli.load(target=str(folder), draft=str(folder), device="cpu")
    pair.eos_ids = set()
    ids = pair.encode("def fibonacci(n):", chat=False)
    result = pair.generate(prompt_ids=ids, max_new_tokens=100, num_draft_tokens=4)
    assert len(ids) + len(result.token_ids) == 24
    assert result.stats.stop_reason is StopReason.CONTEXT
    assert result.token_ids == reference(pair, ids, 24 - len(ids), set())


def test_drafter_with_different_embedding_rows_but_same_tokenizer(tmp_path, tokenizer):
    """Like Qwen2.5-7B (152064 rows) with 0.5B (151936 rows): one tokenizer, lossless output."""
    vocab = len(tokenizer)
    target = save_model(
        tmp_path / "t", make_model("qwen2", vocab + 64, layers=2, seed=3, eos_token_id=None), tokenizer
    )
    draft = save_model(
        tmp_path / "d", make_model("qwen2", vocab, layers=1, seed=4, eos_token_id=None), tokenizer
    )
    for t, d in ((target, draft), (draft, target)):
        pair = specli.load(target=str(t), draft=str(d), device="cpu")
        pair.eos_ids = set()
        ids = pair.encode("def f(x):", chat=False)
        assert pair.generate(prompt_ids=ids, max_new_tokens=15).token_ids == reference(pair, ids, 15, set())


def test_generate_twice_on_one_pair_matches_a_fresh_pair(tiny_pair):
    target_dir, draft_dir = tiny_pair
    pair = specli.load(target=str(target_dir), draft=str(draft_dir), device="cpu")
    first = pair.generate("def fibonacci(n):", max_new_tokens=25, num_draft_tokens=3)
    pair.generate("something else entirely", max_new_tokens=9, temperature=0.9, seed=3)
    second = pair.generate("def fibonacci(n):", max_new_tokens=25, num_draft_tokens=3)
    fresh = specli.load(target=str(target_dir), draft=str(draft_dir), device="cpu").generate(
        "def fibonacci(n):", max_new_tokens=25, num_draft_tokens=3
    )
    assert first.token_ids == second.token_ids == fresh.token_ids
    assert first.text == pair.decode(first.token_ids)


def test_seeded_sampling_is_reproducible(tiny_pair):
    """With a fixed k, one seed gives one sample (the per-round k otherwise follows measured speed)."""
    pair = specli.load(target=str(tiny_pair[0]), draft=str(tiny_pair[1]), device="cpu")
    a = pair.generate("x = ", max_new_tokens=20, temperature=1.0, top_p=0.9, seed=7, fixed_k=True)
    b = pair.generate("x = ", max_new_tokens=20, temperature=1.0, top_p=0.9, seed=7, fixed_k=True)
    assert a.token_ids == b.token_ids


def test_stop_string_ends_generation_with_the_string(tiny_pair):
    pair = specli.load(target=str(tiny_pair[0]), draft=str(tiny_pair[1]), device="cpu")
    pair.eos_ids = set()
    free = pair.generate("import os", max_new_tokens=30)
    stop = free.text[8:11]
    assert stop and stop in free.text
    result = pair.generate("import os", max_new_tokens=30, stop=[stop])
    assert result.stats.stop_reason is StopReason.STOP_STRING
    # generation ends with the token that completes the stop string: the shortest prefix holding it
    end = next(n for n in range(1, len(free.token_ids) + 1) if stop in pair.decode(free.token_ids[:n]))
    assert result.token_ids == free.token_ids[:end]
    assert stop in result.text and stop not in pair.decode(result.token_ids[:-1])


@pytest.mark.parametrize("strategy", ["draft", "lookup", "none"])
@pytest.mark.parametrize("arch", ["gemma2", "mistral"])
def test_sliding_window_caches_roll_back_past_the_window(tmp_path, tokenizer, arch, strategy):
    """A window (4) much shorter than the sequence: rejected drafts stay removable (docs/design.md §5).
    On transformers < 5.18 the target's side still works; drafting through sliding layers is refused."""
    vocab = len(tokenizer)
    untied = dict(eos_token_id=None, sliding_window=4, tie_word_embeddings=False)
    target = make_model(arch, vocab, layers=2, seed=7, **untied)
    draft = make_model(arch, vocab, layers=1, seed=8, **untied)
    pair = specli.load(
        target=str(save_model(tmp_path / "t", target, tokenizer)),
        draft=str(save_model(tmp_path / "d", draft, tokenizer)),
        device="cpu",
    )
    pair.eos_ids = set()
    ids = pair.encode("import os\nfor i in range(10):\n    x = i\nfor i in range(10):", chat=False)
    if strategy == "draft" and OLD_SLIDING_CACHE:
        with pytest.raises(SpecliError, match="transformers 5.18"):
            pair.generate(prompt_ids=ids, max_new_tokens=24, strategy=strategy)
        return
    result = pair.generate(prompt_ids=ids, max_new_tokens=24, num_draft_tokens=3, strategy=strategy)
    if strategy != "none":
        assert any(r.accepted < len(r.drafted) for r in result.rounds)  # rollbacks happened
    assert result.token_ids == reference(pair, ids, 24, set())


def test_old_transformers_refuses_drafting_past_a_sliding_window_only(tmp_path, tokenizer, monkeypatch):
    """The < 5.18 guard, checked on any transformers: a window the generation can pass is refused with
    the upgrade hint when the drafter steps through transformers; a window it cannot reach (Mistral's
    default 4096) drafts as usual, and so does the lean step, which needs no transformers cache."""
    import transformers

    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    vocab = len(tokenizer)
    target = make_model("mistral", vocab, layers=2, seed=7, sliding_window=None)
    paths = {}
    for window in (8, 4096):
        draft = make_model("mistral", vocab, layers=1, sliding_window=window)
        paths[window] = save_model(tmp_path / f"d{window}", draft, tokenizer)
    target_dir = str(save_model(tmp_path / "t", target, tokenizer))
    short = specli.load(target=target_dir, draft=str(paths[8]), device="cpu", lean=False)
    with pytest.raises(SpecliError, match=r"window 8\) and this generation can reach") as err:
        short.generate("import os", max_new_tokens=20)
    assert "transformers>=5.18" in str(err.value.hint)
    # the lean step applies the window itself (no transformers cache): it drafts past it on any version
    lean = specli.load(target=target_dir, draft=str(paths[8]), device="cpu")
    assert lean.drafter_step() == "lean"
    ids = lean.encode("import os", chat=False)
    result = lean.generate(prompt_ids=ids, max_new_tokens=20)
    assert result.stats.drafted > 0 and result.token_ids == reference(lean, ids, 20, set())
    long = specli.load(target=target_dir, draft=str(paths[4096]), device="cpu")
    assert long.generate("import os", max_new_tokens=20).stats.drafted > 0


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_drafter_with_a_shorter_context_drafts_from_the_recent_tokens(tmp_path, tokenizer, temperature):
    """A prompt longer than the drafter's context: the drafter works on the most recent tokens it can hold
    (it keeps proposing, and is right often: it is the target itself), the output stays the target's."""
    vocab = len(tokenizer)
    target = make_model("llama", vocab, layers=2, seed=21, max_positions=256, eos_token_id=None)
    short = make_model("llama", vocab, layers=2, seed=21, max_positions=24, eos_token_id=None)
    short.load_state_dict(target.state_dict())  # same weights, shorter context: drafts agree when they fit
    target_dir = save_model(tmp_path / "t", target, tokenizer)
    draft_dir = save_model(tmp_path / "d", short, tokenizer)
    pair = specli.load(target=str(target_dir), draft=str(draft_dir), device="cpu")
    pair.eos_ids = set()
    ids = pair.encode(PROMPTS[2] * 2, chat=False)
    assert len(ids) > 24
    result = pair.generate(
        prompt_ids=ids, max_new_tokens=40, num_draft_tokens=4, temperature=temperature, seed=0
    )
    assert len(result.token_ids) == 40
    drafting = [r for r in result.rounds if r.drafted]
    plain = [r for r in result.rounds if not r.drafted]  # only a last round with 1 token left drafts nothing
    assert len(drafting) >= len(result.rounds) - 1 and all(r.draft_reason == "budget" for r in plain)
    assert all(r is result.rounds[-1] for r in plain)
    assert result.stats.accepted > 0
    if temperature == 0:
        assert result.token_ids == reference(pair, ids, 40, set())
