"""Suffix lookup: the suffix index against a brute-force search of every suffix, its memory, the lookup
drafter's proposals and views, greedy identity with transformers' generate(), and lookup's default k."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import make_model, save_model

import specli
from specli.drafters.prompt_lookup import PromptLookupDrafter
from specli.drafters.suffix_index import SuffixIndex
from specli.engine.sampling import SamplingConfig
from specli.errors import UsageError
from specli.pair import Pair
from specli.presets import ModelSpec, Preset, SpeculationSpec, resolve_preset
from specli.render.explain import ExplainView
from specli.settings import resolve_settings
from specli.strategies import LOOKUP_DRAFT_TOKENS, LOOKUP_DRAFT_TOKENS_LLAMA

# --------------------------------------------------------------------------- brute force


def brute_continuation(text: list[int], seq: list[int], ngram_min: int, ngram_max: int):
    """Rescan everything: the longest suffix of seq (ngram_min..ngram_max tokens) that some token followed
    in text; of those tokens the most frequent, ties to the latest -> (token, length, count, total,
    position of its latest occurrence) or None."""
    for length in range(min(ngram_max, len(seq)), ngram_min - 1, -1):
        suffix = seq[len(seq) - length :]
        counts: dict[int, int] = {}
        latest: dict[int, int] = {}
        for end in range(length - 1, len(text) - 1):
            if text[end - length + 1 : end + 1] == suffix:
                token = text[end + 1]
                counts[token] = counts.get(token, 0) + 1
                latest[token] = end + 1
        if counts:
            token = max(counts, key=lambda t: (counts[t], latest[t]))
            return token, length, counts[token], sum(counts.values()), latest[token]
    return None


def brute_draft(text: list[int], k: int, ngram_min: int, ngram_max: int) -> list[tuple[int, ...]]:
    """Up to k tokens, each the brute-force continuation of text + the tokens drafted before it."""
    seq, drafted = list(text), []
    while len(drafted) < k:
        found = brute_continuation(text, seq, ngram_min, ngram_max)
        if found is None:
            break
        drafted.append(found)
        seq.append(found[0])
    return drafted


def as_tuples(index: SuffixIndex, k: int) -> list[tuple[int, ...]]:
    return [(c.token, c.length, c.count, c.total, c.position) for c in index.draft(k)]


# --------------------------------------------------------------------------- the index


@pytest.mark.parametrize("seed", range(12))
def test_index_equals_a_brute_force_search_after_every_token(seed):
    """Random strings over small alphabets (many repeats, many branches), random [ngram_min, ngram_max]:
    after each appended token, a draft of 6 (longest match, frequency choice, tie rule, lengths, counts,
    positions, and matching through drafted tokens) equals a full rescan of every suffix."""
    rng = random.Random(seed)
    ngram_min = rng.randint(1, 3)
    ngram_max = ngram_min + rng.randint(0, 4)
    alphabet = rng.choice([2, 3, 5, 9])
    index, text = SuffixIndex(ngram_min, ngram_max), []
    for _ in range(160):
        token = rng.randrange(alphabet)
        text.append(token)
        index.append(token)
        assert as_tuples(index, 6) == brute_draft(text, 6, ngram_min, ngram_max), (len(text), text)


def test_the_most_frequent_continuation_wins_and_a_tie_goes_to_the_latest():
    index = SuffixIndex(1, 2)
    index.extend([1, 2, 7, 1, 2, 7, 1, 2, 8, 5, 1, 2])  # "1 2" was followed by 7 twice, by 8 once
    first = index.draft(1)[0]
    assert (first.token, first.length, first.count, first.total, first.start) == (7, 2, 2, 3, 3)
    index.extend([8, 5, 1, 2])  # now 8 twice as well: the tie goes to the latest, 8
    first = index.draft(1)[0]
    assert (first.token, first.count, first.total, first.start) == (8, 2, 4, 10)


def test_the_longest_match_within_the_bounds_decides():
    """ "3 1 2" was followed by 9 once; "1 2" by 7 twice. ngram_max 3 sees the longer match, 2 does not;
    ngram_min 3 refuses a text whose last 3 tokens never occurred before."""
    text = [1, 2, 7, 1, 2, 7, 3, 1, 2, 9, 4, 3, 1, 2]
    longer, shorter = SuffixIndex(1, 3), SuffixIndex(1, 2)
    longer.extend(text)
    shorter.extend(text)
    assert (longer.draft(1)[0].token, longer.draft(1)[0].length) == (9, 3)
    assert (shorter.draft(1)[0].token, shorter.draft(1)[0].length) == (7, 2)
    strict = SuffixIndex(3, 3)
    strict.extend([1, 2, 7, 1, 2, 7, 5, 1, 2])
    assert strict.draft(4) == []


def test_drafts_follow_the_match_through_drafted_tokens():
    index = SuffixIndex(1, 3)
    index.extend([4, 5, 6, 7, 8, 0, 4, 5])
    assert [c.token for c in index.draft(10)] == [6, 7, 8, 0, 4, 5, 6, 7, 8, 0]


@pytest.mark.parametrize("kind", ["random", "one token", "period 2", "period 7"])
def test_memory_is_linear_in_the_tokens_seen(kind):
    """At most 2n - 1 states and 3n - 4 transitions (n >= 3), and no more follow counts than transitions,
    also on periodic strings whose suffix chains are as long as the text."""
    rng = random.Random(0)
    n = 3000
    text = {
        "random": [rng.randrange(50) for _ in range(n)],
        "one token": [3] * n,
        "period 2": [1, 2] * (n // 2),
        "period 7": list(range(7)) * (n // 7),
    }[kind]
    index = SuffixIndex(1, 8)
    index.extend(text)
    size = index.size()
    assert size.states <= 2 * len(text) - 1 + 1  # + the root
    assert size.transitions <= 3 * len(text) - 4
    assert size.follow_entries <= size.transitions


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="ngram_min"):
        SuffixIndex(3, 2)
    with pytest.raises(ValueError, match="ngram_min"):
        SuffixIndex(0, 2)


# --------------------------------------------------------------------------- the drafter and its view


def test_drafter_proposes_the_index_draft_with_what_the_views_show():
    drafter = PromptLookupDrafter(1, 3)
    drafter.reset([1, 2, 7, 1, 2, 7, 1, 2, 8, 5, 1, 2])
    proposal = drafter.propose(3, SamplingConfig(), None)
    assert proposal.ids.tolist() == [7, 1, 2] and proposal.q is None and proposal.cut is None
    assert proposal.info == {"ngram": 2, "match_start": 3, "context_length": 12, "followed": 3, "chosen": 2}
    drafter.commit(1, 2)  # kept 7, then the target said 2: both enter the index
    assert drafter.draft_state == "match 1"  # only "2" of the tail occurred before
    assert drafter.propose(2, SamplingConfig(), None).info == {
        "ngram": 1,
        "match_start": 11,
        "context_length": 14,
        "followed": 4,
        "chosen": 3,
    }


def test_drafter_proposes_nothing_without_a_match():
    drafter = PromptLookupDrafter(2, 3)
    drafter.reset([1, 2, 3, 1])
    proposal = drafter.propose(4, SamplingConfig(), None)
    assert proposal.ids.numel() == 0 and proposal.cut == "match" and proposal.info == {"ngram": None}


def test_explain_names_the_match_and_how_often_it_was_followed(tokenizer):
    view = ExplainView(tokenizer, "lookup", 4, greedy=True)
    round_ = type("R", (), {"info": {"ngram": 2, "match_start": 3, "context_length": 12, "followed": 3,
                                      "chosen": 2}})()  # fmt: skip
    line = view._drafter_line(round_).plain
    assert "2-gram" in line and "token 3 (of 12)" in line and "2 of the 3 times" in line


# --------------------------------------------------------------------------- greedy identity

ARCHS = ["llama", "qwen2", "mistral", "phi3"]
PROMPTS = {
    "repeating": [5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 5, 6],
    "branching": [3, 4, 5, 3, 4, 6, 3, 4, 5, 3, 4, 7, 8, 3, 4],
    "no repeats": [10, 20, 30, 1, 2, 9],
}


def looping_model(arch: str, vocab: int = 32, seed: int = 11):
    """A random model that repeats itself, as text does: attention and MLP outputs scaled down to 3 %,
    so the next token is mostly a function of the current one (greedy output falls into cycles that
    lookup can copy) while attention over the cache still moves the logits (and some drafts fail)."""
    model = make_model(arch, vocab, layers=3, hidden=64, seed=seed, eos_token_id=None)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                weight.mul_(0.03)
    return model


def reference(model, prompt, n):
    return model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)[
        0, len(prompt) :
    ].tolist()


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_lookup_is_the_targets_own_output(arch, tokenizer):
    """Every prompt, k fixed and chosen per round, other n-gram bounds, and lookup's default k:
    generate()'s ids, with drafts both kept and refused along the way."""
    model = looping_model(arch)
    pair = Pair(model, tokenizer, strategy="lookup")
    pair.eos_ids = set()
    kept = refused = 0
    for name, prompt in PROMPTS.items():
        expected = reference(model, prompt, 48)
        runs = [dict(num_draft_tokens=k, fixed_k=fixed) for k in (2, 16) for fixed in (False, True)]
        for extra in [{}, *runs, dict(ngram_min=2, ngram_max=5, num_draft_tokens=8)]:
            result = pair.generate(prompt_ids=prompt, max_new_tokens=48, **extra)
            assert result.token_ids == expected, (name, extra)
            kept += sum(r.accepted for r in result.rounds)
            refused += sum(r.accepted < len(r.drafted) for r in result.rounds)
    assert kept > 100 and refused > 20, (kept, refused)


def test_greedy_lookup_through_load_is_the_targets_own_output(tmp_path, tokenizer):
    """The user's path: a saved model loaded by specli.load, lookup at its default k."""
    model = looping_model("llama", vocab=len(tokenizer), seed=5)
    pair = specli.load(target=str(save_model(tmp_path / "t", model, tokenizer)), strategy="lookup")
    pair.eos_ids = set()
    prompt = PROMPTS["branching"] + reference(model, PROMPTS["branching"], 60)  # into its cycle
    result = pair.generate(prompt_ids=prompt, max_new_tokens=40)
    assert max(r.draft_limit for r in result.rounds) == LOOKUP_DRAFT_TOKENS  # its first rounds draft that
    assert result.token_ids == reference(model, prompt, 40)
    assert sum(r.accepted for r in result.rounds) > 0  # lookup drafted, and the target kept some


# --------------------------------------------------------------------------- the default k


def test_lookup_defaults_to_its_own_k_where_nobody_names_one():
    """Catches lookup running at a preset's drafter k, or at one engine's k on the other: 32 on the torch
    engine, 16 on llama.cpp (which splits longer verifies), the smaller while the engine is not known."""
    tiny = resolve_preset("tiny")  # strategy draft, num_draft_tokens 4 for its drafter model
    assert resolve_settings(tiny).num_draft_tokens == 4
    assert resolve_settings(tiny, strategy="lookup", engine="torch").num_draft_tokens == LOOKUP_DRAFT_TOKENS
    assert (
        resolve_settings(strategy="lookup", engine="llama.cpp").num_draft_tokens == LOOKUP_DRAFT_TOKENS_LLAMA
    )
    assert resolve_settings(strategy="lookup").num_draft_tokens == LOOKUP_DRAFT_TOKENS_LLAMA
    assert (LOOKUP_DRAFT_TOKENS, LOOKUP_DRAFT_TOKENS_LLAMA) == (32, 16)
    assert resolve_settings(tiny, strategy="lookup", num_draft_tokens=3).num_draft_tokens == 3  # -k wins
    named = Preset(name="l", strategy="lookup", target=ModelSpec(model="a/b"),
                   speculation=SpeculationSpec(num_draft_tokens=6))  # fmt: skip
    assert resolve_settings(named, engine="torch").num_draft_tokens == 6  # a lookup preset's k wins
    assert resolve_settings(named, strategy="draft").num_draft_tokens == 6
    unnamed = Preset(name="u", strategy="lookup", target=ModelSpec(model="a/b"))
    assert resolve_settings(unnamed, engine="torch").num_draft_tokens == LOOKUP_DRAFT_TOKENS


def test_a_loaded_pair_gives_lookup_its_k_and_keeps_the_presets_for_the_drafter():
    lookup = specli.load(strategy="lookup")  # the tiny preset, on the torch engine
    assert lookup.settings().num_draft_tokens == LOOKUP_DRAFT_TOKENS
    assert lookup.settings(strategy="draft").num_draft_tokens == 4
    draft = specli.load()
    assert draft.settings().num_draft_tokens == 4
    assert draft.settings(strategy="lookup").num_draft_tokens == LOOKUP_DRAFT_TOKENS


def test_lookups_own_k_fits_a_short_context_and_a_named_one_is_refused(tokenizer):
    """Catches the default k stopping a generation on a model whose context is shorter than it (cut to
    context - 2), and a k the caller named being cut silently instead of refused."""
    model = make_model("llama", len(tokenizer), layers=2, seed=5, max_positions=24, eos_token_id=None)
    pair = Pair(model, tokenizer, strategy="lookup")
    assert pair.settings().num_draft_tokens == 22
    result = pair.generate(prompt_ids=PROMPTS["branching"][:4], max_new_tokens=12)
    assert len(result.token_ids) == 12
    with pytest.raises(UsageError, match="num-draft-tokens 30 does not fit the context"):
        pair.settings(num_draft_tokens=30)


# --------------------------------------------------------------------------- following the passage


def repeated_span_prompt(seed: int = 3) -> tuple[list[int], list[int]]:
    """A prompt that holds a 40-token span and then starts it again (its first 5 tokens), and the span.
    The span is drawn from 6 tokens, so its 3-grams also occur elsewhere followed by other tokens: only
    a long match tells which passage is being repeated."""
    rng = random.Random(seed)
    span = [rng.randrange(6) for _ in range(40)]
    filler = [rng.randrange(6) for _ in range(30)]
    return filler[:15] + span + filler[15:] + span[:5], span


def test_one_round_drafts_the_whole_remainder_of_a_repeated_span(tiny_target):
    """Through the engine, one round at k = 35 drafts exactly the 35 tokens the span has left; matching
    only 3-grams (the control) strays from it."""
    from specli.engine.loop import EngineConfig, generate_rounds
    from specli.engine.stopping import StopCriteria
    from specli.models.cached_lm import CachedLM

    prompt, span = repeated_span_prompt()
    config = EngineConfig(max_new_tokens=36, num_draft_tokens=35, fixed_k=True)

    def first_draft(drafter: PromptLookupDrafter) -> list[int]:
        rounds = generate_rounds(CachedLM(tiny_target), drafter, prompt, config, StopCriteria(set()))
        return list(next(iter(rounds)).drafted)

    assert first_draft(PromptLookupDrafter()) == span[5:]
    assert first_draft(PromptLookupDrafter(1, 3)) != span[5:]


@pytest.fixture(scope="module")
def tiny_target():
    return make_model("llama", 16, layers=1, hidden=16, seed=5, eos_token_id=None)
