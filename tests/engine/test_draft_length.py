"""Draft length chosen per round (docs/design.md §11): the controller's choice, the drafters' confidence
threshold, and that any of it leaves the output the target's own."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import make_model
from test_eagle import make_head, reference
from test_lossless_sampling import exact_joint, g_test_pvalue
from test_parallel_drafting import make_pard, make_peagle

from specli.drafters.draft_model import DraftModelDrafter
from specli.drafters.eagle import EagleDrafter
from specli.drafters.prompt_lookup import PromptLookupDrafter
from specli.drafters.self_speculative import SelfSpeculativeDrafter
from specli.engine.draft_length import PLAIN_RETRY, PRIOR_ACCEPT, VERIFY_SLOPE, WARMUP_ROUNDS, DraftLength
from specli.engine.events import expected_acceptance_length
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig
from specli.engine.stopping import StopCriteria
from specli.models.cached_lm import CachedLM
from specli.models.layer_stack import LayerStack

# --------------------------------------------------------------------------- the controller


def feed(length: DraftLength, rounds: int, k: int, accepted: int, draft: float, verify: float) -> None:
    for _ in range(rounds):
        length.observe(k, accepted, draft, verify)


def test_fixed_and_budget():
    length = DraftLength(6, fixed=True)
    feed(length, 10, 6, 0, 1.0, 1.0)  # terrible acceptance: a fixed k does not care
    assert length.choose(100) == (6, "fixed")
    assert length.choose(4) == (3, "budget")  # room for 3 drafts + the target's token
    assert length.choose(1) == (0, "budget")


def test_warm_up_drafts_the_maximum_then_the_cost_model_decides():
    length = DraftLength(8)
    for _ in range(WARMUP_ROUNDS):
        assert length.choose(100) == (8, "warm-up")
        length.observe(8, 0, 8e-3, 2e-3)
    k, why = length.choose(100)
    assert why == "cost model" and k < 8


def test_a_round_whose_forward_carried_the_prompt_teaches_acceptance_not_costs():
    """Catches the first round's forward (the prompt's prefill with its drafts, the torch engine) priced
    as a verify: its time would make every later round look costly. Its acceptance counts; its costs and
    the warm-up do not."""
    length = DraftLength(8)
    for _ in range(2 * WARMUP_ROUNDS):
        length.observe(8, 8, 1e-3, 5.0, timed=False)
    assert length.cost(8) is None and length.choose(100) == (8, "warm-up")
    assert length.accept_probs()[0] > 0.9
    for _ in range(WARMUP_ROUNDS):
        length.observe(8, 8, 1e-3, 2e-3)
    assert length.cost(8) == pytest.approx(1e-3 + 2e-3)  # the timed rounds' draft + verify, not 5 s


def test_drafts_riding_in_the_prompts_forward_are_priced_by_their_row():
    """Catches the first round (its forward is the prompt's) priced as a verify of its own: a draft there
    costs its row (the verify line's slope, 0.4 steps here) and its drafting. At 0.95 acceptance a round
    of its own stops near 5 drafts (a verify of 17 costs 7.4 steps), the prompt's round drafts all 16
    (0.95^16 > 0.4); at 0.1 the chance of keeping a draft is below a row's price at once."""
    length = DraftLength(16, state_priors={"long": 0.95, "short": 0.1})
    for n in (2, 17):  # verify: 10 ms + 4 ms a token; a one-token step 10 ms
        for _ in range(WARMUP_ROUNDS):
            length.observe(n - 1, n - 1, 0.0, 0.010 + 0.004 * (n - 1), state="other")
    for _ in range(WARMUP_ROUNDS):
        length.observe(0, 0, 0.0, 0.010, verified=1)
    assert length.choose(100, "long")[0] <= 6  # a round of its own stops where a forward no longer pays
    assert length.choose_with_prompt(100, "long") == (16, "cost model")
    assert length.choose_with_prompt(100, "short") == (0, "cost model")
    assert length.choose_with_prompt(5, "long") == (4, "budget")
    assert DraftLength(16).choose_with_prompt(100) == (16, "warm-up")


def test_expected_tokens_is_the_closed_form_when_every_position_has_the_same_rate():
    length = DraftLength(5)
    for k in range(6):
        assert length.expected_tokens(k) == pytest.approx(expected_acceptance_length(PRIOR_ACCEPT, k))


def test_only_judged_positions_learn():
    """A round drafting 4 whose second draft is rejected judged positions 1 and 2 only: 1 kept, 2 not;
    3 and 4, never judged, are taken to be as good as the judged positions on average (about 1/2)."""
    length = DraftLength(4)
    feed(length, 30, 4, 1, 1e-3, 1e-3)
    a = length.accept_probs()
    assert a[0] > 0.85 and a[1] < 0.15  # each leans on the pooled estimate (about 1/2)
    assert a[2] == a[3] == pytest.approx(0.5, abs=0.04)


def test_sampled_rounds_learn_each_drafts_chance_not_its_outcome():
    """A sampled chain round hands its min(1, p/q) per draft: the judged positions learn those chances
    (the first two kept with chances 0.3 and 0.6, the third refused with 0.2), the unjudged fourth
    nothing; a round without them learns 1 / 0 outcomes, as greedy rounds always do."""
    chances, outcomes = DraftLength(4), DraftLength(4)
    for _ in range(200):
        chances.observe(4, 2, 1e-3, 1e-3, accept_probs=[0.3, 0.6, 0.2, 0.9])
        outcomes.observe(4, 2, 1e-3, 1e-3)
    a = chances.accept_probs()  # each leans a little on the pooled estimate (about 0.37)
    assert a[:3] == pytest.approx([0.3, 0.6, 0.2], abs=0.05)
    assert a[3] == pytest.approx(sum(a[:3]) / 3, abs=0.03)  # never judged: the pooled estimate
    assert outcomes.accept_probs()[:3] == pytest.approx([1.0, 1.0, 0.0], abs=0.1)


def test_the_loop_hands_the_cost_model_each_drafts_chance(tokenizer):
    """generate_rounds passes each chain round's verdict.accept_probs to DraftLength.observe (sampled:
    chances strictly between 0 and 1 reach it, which 0-or-1 outcomes never would)."""
    vocab = len(tokenizer)
    target = CachedLM(make_model("llama", vocab, layers=2, seed=3))
    drafter = DraftModelDrafter(CachedLM(make_model("llama", vocab, layers=1, seed=4)), vocab)
    seen: list[list[float] | None] = []
    length = DraftLength(3, fixed=True)
    observe = length.observe
    length.observe = lambda *a, **k: (seen.append(k.get("accept_probs")), observe(*a, **k))[1]  # type: ignore[method-assign]
    config = EngineConfig(max_new_tokens=12, num_draft_tokens=3, fixed_k=True,
                          sampling=SamplingConfig(temperature=1.0), seed=0)  # fmt: skip
    rounds = list(generate_rounds(target, drafter, [5, 6, 7], config, StopCriteria(set()), length=length))
    drafted = [r for r in rounds if r.drafted]
    assert seen and all(p is not None for p in seen[: len(drafted)])
    assert [p for p in seen if p] == [r.accept_probs for r in drafted]
    assert any(0.0 < x < 1.0 for p in seen if p for x in p)


@pytest.mark.parametrize(
    ("accepted", "draft_per_token", "expected"),
    [
        (6, 0.02, 6),  # everything accepted, cheap drafts: draft the maximum
        (0, 0.5, 1),  # nothing accepted, costly drafts: draft as little as possible
        (2, 0.2, 2),  # the first two always kept, the third never: draft exactly two
    ],
)
def test_the_cost_model_maximizes_expected_tokens_per_second(accepted, draft_per_token, expected):
    length = DraftLength(6)
    for k in (6, 4, 2, 6, 3, 5) * 10:  # several k, so the cost lines are fitted
        length.observe(k, min(accepted, k), draft_per_token * k, 1.0 + 0.05 * k)
    assert length.choose(100) == (expected, "cost model")


def test_a_parallel_drafter_drafts_longer_at_the_same_acceptance():
    """Same acceptance, draft time growing with k (autoregressive) or flat (parallel): the parallel
    drafter's k is larger."""
    ar, par = DraftLength(8), DraftLength(8, parallel=True)
    for k in (8, 5, 3, 8, 6, 2) * 10:
        ar.observe(k, min(2, k), 0.3 * k, 1.0)
        par.observe(k, min(2, k), 0.3, 1.0)
    assert par.choose(100)[0] > ar.choose(100)[0]


def test_costs_fitted_from_one_k_assume_an_autoregressive_line():
    """Seen at k = 4 only: an autoregressive drafter's cost is taken to grow in proportion to k, a
    parallel one's to stay flat."""
    ar, par = DraftLength(8), DraftLength(8, parallel=True)
    for length in (ar, par):
        feed(length, 5, 4, 4, 0.4, 1.0)
    verify = 4 * VERIFY_SLOPE * 1.0  # 4 more tokens, each VERIFY_SLOPE of the verify time seen
    assert ar.cost(8) - ar.cost(4) == pytest.approx(0.4 + verify)  # draft time doubles with k
    assert par.cost(8) - par.cost(4) == pytest.approx(verify)


def linear_timings(u: float, a: float, b: float, parallel: bool = False, p: float = 0.85) -> DraftLength:
    """A controller fed rounds of several k whose times are exactly linear: drafting u per token (per round
    when parallel), verifying n tokens a + b·n. Acceptance: each draft kept with probability p (a fixed
    seed, so every call sees the same rounds)."""
    length, rng = DraftLength(6, parallel=parallel), random.Random(0)
    for k in (6, 4, 2, 5, 3, 1) * 8:
        accepted = next(i for i in range(k + 1) if i == k or rng.random() > p)
        length.observe(k, accepted, u if parallel else u * k, a + b * (k + 1))
    return length


@pytest.mark.parametrize("parallel", [False, True], ids=["autoregressive", "parallel"])
@pytest.mark.parametrize(("a", "b"), [(1.0, 0.1), (0.5, 0.3), (-0.2, 0.3)])
def test_costs_are_the_linear_timings_they_were_fed(parallel, a, b):
    """Exactly linear times give back exactly their line: draft(k) + a + b·(k+1), in seconds (not only its
    differences). A fit whose intercept changes sign, or that files a verify of k+1 tokens under another
    length, is off by at least b."""
    u = 0.07
    length = linear_timings(u, a, b, parallel)
    for k in range(1, 7):
        draft = u if parallel else u * k
        assert length.cost(k) == pytest.approx(draft + a + b * (k + 1), rel=1e-9, abs=1e-12), k


def test_costs_seen_at_one_length_are_that_lengths_mean():
    """Only k = 4 seen (5 tokens verified): cost(4) is exactly the draft and verify times measured there;
    other k extrapolate VERIFY_SLOPE of that verify time per token."""
    ar, par = DraftLength(8), DraftLength(8, parallel=True)
    for length in (ar, par):
        feed(length, 5, 4, 4, 0.4, 1.0)
    assert ar.cost(4) == pytest.approx(0.4 + 1.0) and par.cost(4) == pytest.approx(0.4 + 1.0)
    assert ar.cost(2) == pytest.approx(0.2 + 1.0 - 2 * VERIFY_SLOPE)
    assert par.cost(7) == pytest.approx(0.4 + 1.0 + 3 * VERIFY_SLOPE)


def test_plain_steps_do_not_steepen_the_verify_line():
    """Rounds that drafted nothing verify one token, often through a cheaper path (no mask, one row of
    logits): 1.0 here, against 1.4 + 0.05 per token for 2..5 tokens. choose() only prices drafting
    rounds, so their line is the drafted points' alone; fitted through the plain steps' point it would
    price each drafted token at about 0.1 and choose short drafts (lookup drafted 1.9 a round where 3
    paid). Catches the plain steps kept in the fit."""
    length = DraftLength(4)
    for i in range(40):
        k = i % 5  # 0 (a plain step: nothing matched) .. 4
        accepted = min(k, [0, 1, 2, 3, 4][(i * 7) % 5] if k else 0)
        verify = 1.0 if k == 0 else 1.4 + 0.05 * (k + 1)
        length.observe(k, accepted, 0.0, verify)
    intercept, slope = length._costs.verify_line()
    assert slope == pytest.approx(0.05) and intercept == pytest.approx(1.4)
    assert length.cost(1) == pytest.approx(1.5) and length.cost(4) == pytest.approx(1.65)


def test_a_plain_steps_verify_is_the_line_until_a_round_drafts():
    length = DraftLength(4)
    feed(length, 3, 0, 0, 0.0, 1.0)
    feed(length, 1, 2, 1, 0.02, 1.3)
    assert length.cost(2) == pytest.approx(0.02 + 1.3)  # the one drafted length seen: its own mean


def test_the_choice_flips_at_the_break_even_draft_cost():
    """Near the draft cost per token u* at which drafting 3 and drafting 4 give the same expected tokens per
    second (from the controller's own E(k) and the true linear costs), the controller drafts 4 just below
    u* and 3 just above it. A cost line off by a constant, or with its intercept's sign flipped, moves
    the break-even point past one side."""
    a, b = 1.0, 0.1
    fed = linear_timings(0.1, a, b)
    e = [fed.expected_tokens(j) for j in range(7)]
    k = 3
    u_star = (e[k + 1] * (a + b * (k + 1)) - e[k] * (a + b * (k + 2))) / (e[k] * (k + 1) - e[k + 1] * k)
    assert 0.1 < u_star < 0.4  # a draft cost where this choice is a real one

    def best(u: float) -> int:  # the k maximizing E(k) / cost(k) under the true costs
        return max(range(1, 7), key=lambda j: (e[j] / (u * j + a + b * (j + 1)), -j))

    for u, expected in ((u_star * 0.98, k + 1), (u_star * 1.02, k)):
        length = linear_timings(u, a, b)
        assert [length.expected_tokens(j) for j in range(7)] == pytest.approx(e)  # same acceptance
        assert best(u) == expected
        assert length.choose(100) == (expected, "cost model"), u


def test_at_equal_expected_rates_the_smaller_k_wins():
    """Every k expected to commit the same tokens per second (drafts never kept, so E(k) = 1; a parallel
    drafter whose rounds and verifies cost the same at every length): the controller drafts 1, the least
    work for the same rate. Catches: a tie broken towards the larger k (or the last one compared)."""
    length = DraftLength(6, parallel=True)
    for k in (1, 3, 6, 2, 5, 4):  # every length measured, each at the same cost
        for _ in range(WARMUP_ROUNDS):
            length.observe(k, 0, 4e-3, 8e-3)
    length.accept_probs = lambda state=None: [0.0] * 6  # never kept: E(k) = 1 for every k
    assert [length.expected_tokens(k) for k in range(7)] == [1.0] * 7
    assert len({length.cost(k) for k in range(1, 7)}) == 1  # the same cost at every k: a true tie
    assert length.choose(100) == (1, "cost model")
    assert length.choose(4) == (1, "cost model")


# --------------------------------------------------------------------------- through the engine


def rounds_of(target, drafter, prompt, k=4, n=30, **config):
    cfg = EngineConfig(max_new_tokens=n, num_draft_tokens=k, **config)
    return list(generate_rounds(CachedLM(target), drafter, prompt, cfg, StopCriteria(set())))


PROMPT = [3, 44, 17, 250, 9, 81, 12]


def drafters(target, p_min):
    """Every drafter kind, built for target, each ending its drafts below p_min."""
    arch = target.config.model_type
    draft = make_model(arch, 384, layers=1, seed=2, eos_token_id=None)
    pard = make_pard(arch)
    return {
        "draft": DraftModelDrafter(CachedLM(draft), 384, p_min=p_min),
        "pard": DraftModelDrafter(CachedLM(pard), 384, mask_token=383, p_min=p_min),
        "self": SelfSpeculativeDrafter(LayerStack(target), 2, p_min=p_min),
        "eagle3": EagleDrafter(make_head(target, "eagle3", std=0.3), target, p_min=p_min),
        "peagle": EagleDrafter(make_peagle(target, std=0.3), target, p_min=p_min),
        "lookup": PromptLookupDrafter(1, 3),
    }


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_threshold_and_controller_keep_greedy_output_identical(arch):
    """Drafts cut at the threshold (sometimes before the first token), a k chosen per round: output
    equals generate() for every drafter; rounds say why they drafted what they did."""
    target = make_model(arch, 384, layers=4, seed=4, eos_token_id=None).eval()
    expected = reference(target, PROMPT, 30)
    for name, drafter in drafters(target, p_min=0.1).items():  # these random drafters' top p: 0.02-0.3
        rounds = rounds_of(target, drafter, PROMPT)
        assert [t for r in rounds for t in r.committed] == expected, name
        reasons = {r.draft_reason for r in rounds}
        # a model-free drafter (lookup) may also take plain rounds where they measure faster (timing-based)
        plain = {"cost model: plain pays more"} if name == "lookup" else set()
        assert reasons <= {"warm-up", "cost model", "budget", "threshold", "match"} | plain, (name, reasons)
        assert all(len(r.drafted) <= r.draft_limit for r in rounds), name
        if name != "lookup":
            assert "threshold" in reasons, name  # a random drafter is often unsure
            cut = [r for r in rounds if r.draft_reason == "threshold"]
            assert all(len(r.drafted) < r.draft_limit for r in cut), name
            if name in ("draft", "pard", "self"):  # cut after some drafts, and before the first
                assert {len(r.drafted) > 0 for r in cut} == {True, False}, name


def test_fixed_k_drafts_k_every_round_until_the_budget():
    target = make_model("llama", 384, layers=4, seed=4, eos_token_id=None).eval()
    drafter = DraftModelDrafter(CachedLM(make_model("llama", 384, layers=1, seed=2)), 384)
    rounds = rounds_of(target, drafter, PROMPT, k=3, n=20, fixed_k=True)
    assert all(r.draft_limit == 3 and r.draft_reason == "fixed" for r in rounds[:-3])
    assert all(len(r.drafted) == r.draft_limit for r in rounds)


def test_a_draft_cut_by_the_threshold_still_samples_the_target_distribution():
    """p_min between the drafter's confidence after the different d_1: whether the first round drafts 1
    or 2 tokens depends on the d_1 it drew. The first two tokens' joint still matches the target's."""
    v = 8
    target = make_model("llama", v, layers=3, hidden=32, seed=21, init_range=0.6, eos_token_id=None).eval()
    draft = make_model("llama", v, layers=2, hidden=32, seed=7, init_range=0.6, eos_token_id=None).eval()
    prompt = [1, 5, 2, 7, 3]
    p_min = 0.6  # this drafter: 0.62 sure of d_1; 0.81 sure after d_1 = 4 (q 0.31), 0.48 after 5 (q 0.62)
    with torch.no_grad():
        first = draft(torch.tensor([prompt])).logits[0, -1].softmax(-1).max()
        after = draft(torch.tensor([prompt + [4], prompt + [5]])).logits[:, -1].softmax(-1).amax(-1)
    assert first >= p_min and after[0] >= p_min > after[1]
    cfg = SamplingConfig(0.9, top_k=6)
    exact = exact_joint(target, cfg)
    drafter = DraftModelDrafter(CachedLM(draft), v, p_min=p_min)
    counts, lengths = torch.zeros(v, v), set()
    for seed in range(2500):
        rounds = rounds_of(target, drafter, prompt, k=2, n=3, sampling=cfg, seed=seed)
        lengths.add(len(rounds[0].drafted))
        tokens = [t for r in rounds for t in r.committed]
        counts[tokens[0], tokens[1]] += 1
    assert lengths == {1, 2}  # d_1 = 5 stops the draft, d_1 = 4 does not
    assert g_test_pvalue(counts, exact) > 1e-3


def test_acceptance_is_estimated_per_drafter_state():
    """Lookup on a long match keeps everything; on a one-token match, little: the long match drafts
    the maximum, the short one less."""
    length = DraftLength(8)
    for k in (8, 6, 4, 7, 5) * 6:
        length.observe(k, k, 1e-5, 1e-3 * (1 + 0.1 * k), "match 16+")
        length.observe(k, 0, 1e-5, 1e-3 * (1 + 0.1 * k), "match 1")
    assert length.choose(100, "match 16+") == (8, "cost model")
    assert length.choose(100, "match 1")[0] == 1


def test_a_model_free_drafter_gets_plain_rounds_where_drafting_does_not_pay():
    """skip (lookup): where every draft is rejected and a verify of two tokens costs 1.5 plain steps,
    the round drafts nothing, PLAIN_RETRY rounds in a row, then drafts once to measure again, each
    refused retry doubling the wait up to PLAIN_RETRY_MAX and a state that pays resetting it; without
    skip (a drafter whose model would have to catch up) it drafts one token; a state that copies
    still drafts the maximum."""

    def trained(skip: bool) -> DraftLength:
        length = DraftLength(8, skip=skip)
        for _ in range(30):
            length.observe(1, 0, 1e-5, 1.5e-3, "match 1")
            length.observe(8, 8, 1e-5, 1e-3 * (1 + 0.5 * 8), "match 16+")
            length.observe(0, 0, 0.0, 1e-3, "no match")  # plain rounds: a one-token forward, 1 ms
        return length

    length = trained(skip=True)
    choices = [length.choose(100, "match 1") for _ in range(PLAIN_RETRY + 1)]
    assert choices[:PLAIN_RETRY] == [(0, "cost model: plain pays more")] * PLAIN_RETRY
    assert choices[PLAIN_RETRY][0] >= 1  # the retry
    length.observe(1, 0, 1e-5, 1.5e-3, "match 1")  # refused again: the next retry waits twice as long
    choices = [length.choose(100, "match 1") for _ in range(2 * PLAIN_RETRY + 1)]
    assert [k for k, _ in choices] == [0] * (2 * PLAIN_RETRY) + [choices[-1][0]] and choices[-1][0] >= 1
    waits = []
    for _ in range(8):  # refused every time: the wait doubles up to PLAIN_RETRY_MAX
        length.observe(1, 0, 1e-5, 1.5e-3, "match 1")
        streak = 0
        while length.choose(100, "match 1")[0] == 0:
            streak += 1
        waits.append(streak)
    assert waits == [64, 128, 256, 256, 256, 256, 256, 256]
    assert length.choose(100, "match 16+") == (8, "cost model")  # copying pays: the wait starts over
    again = [length.choose(100, "match 1")[0] for _ in range(PLAIN_RETRY + 1)]
    assert again[:PLAIN_RETRY] == [0] * PLAIN_RETRY and again[-1] >= 1
    assert trained(skip=False).choose(100, "match 1") == (1, "cost model")


def test_lookup_names_the_length_of_its_match():
    """draft_state is the bucket of the suffix the next draft's first token is matched by."""
    lookup = PromptLookupDrafter(1, 32)
    lookup.reset([5, 6, 7, 8, 9, 5, 6])
    assert lookup.draft_state == "match 2-3"  # "5 6"
    proposal = lookup.propose(2, SamplingConfig(), None)
    assert proposal.ids.tolist() == [7, 8]
    lookup.commit(2, 9)  # both copied tokens kept, and the target's next one continues the copy
    assert lookup.draft_state == "match 4-7"  # "5 6 7 8 9"
    lookup.propose(3, SamplingConfig(), None)
    lookup.commit(0, 42)  # a token never seen before
    assert lookup.draft_state == "no match"


def test_state_priors_set_the_first_rounds_of_each_state():
    """Before any round of a state is measured, its acceptance is the drafter's prior for it: lookup's
    long match drafts far more at once than its one-token match (verify costs known from load), and a
    state it does not name starts from PRIOR_ACCEPT."""
    from specli.drafters.prompt_lookup import STATE_PRIORS

    costs = {n: 1e-3 * (1 + 0.4 * (n - 1)) for n in range(1, 18)}  # a CPU's nearly linear verify
    length = DraftLength(16, verify_prior=costs, state_priors=STATE_PRIORS)
    assert length.accept_probs("match 16+")[0] == pytest.approx(STATE_PRIORS["match 16+"])
    assert length.accept_probs("other")[0] == pytest.approx(PRIOR_ACCEPT)
    long, short = length.choose(100, "match 16+")[0], length.choose(100, "match 1")[0]
    assert long >= 5 and short == 0  # a one-token match is not worth a two-token verify here
    assert DraftLength(16, verify_prior=costs).choose(100, "match 16+")[0] < long  # the 0.7 prior


# --------------------------------------------------------------------------- across generations


def test_a_pair_keeps_its_draft_length_across_generations(tokenizer):
    """Bug caught: DraftLength rebuilt for every generation (each prompt pays the cost model's warm-up
    again: its first WARMUP_ROUNDS rounds always "warm-up"), or kept across an attach of another drafter,
    or shared between settings that change acceptance. The output stays the target's either way."""
    from specli.pair import Pair

    target, draft = make_model("llama", layers=2, seed=1).eval(), make_model("llama", layers=1, seed=2).eval()
    pair = Pair(target, tokenizer, draft_model=draft, strategy="draft")
    prompt = [5, 17, 42, 9, 100, 7]
    first = pair.generate(prompt_ids=prompt, max_new_tokens=24, num_draft_tokens=3)
    assert [r.draft_reason for r in first.rounds[:WARMUP_ROUNDS]] == ["warm-up"] * WARMUP_ROUNDS
    second = pair.generate(prompt_ids=prompt, max_new_tokens=24, num_draft_tokens=3)
    assert second.token_ids == first.token_ids
    assert "warm-up" not in [r.draft_reason for r in second.rounds]  # learned once, kept
    (length,) = pair._draft_lengths.values()
    assert length.cost(1) is not None
    other = pair.generate(prompt_ids=prompt, max_new_tokens=24, num_draft_tokens=2)  # other settings
    assert other.rounds[0].draft_reason == "warm-up" and len(pair._draft_lengths) == 2
    pair.attach("another", draft_model=make_model("llama", layers=1, seed=3).eval())
    assert pair._draft_lengths == {}
    again = pair.generate(prompt_ids=prompt, max_new_tokens=24, num_draft_tokens=3)
    assert again.rounds[0].draft_reason == "warm-up" and again.token_ids == first.token_ids


def test_a_seeded_sample_is_the_same_on_every_call_of_one_pair(tokenizer):
    """Bug caught: a seeded sampled generation drawing its k from what earlier calls learned (the tokens a
    seed draws depend on each round's k, so the same seed gave other text on the second call)."""
    from specli.pair import Pair

    target, draft = make_model("llama", layers=2, seed=1).eval(), make_model("llama", layers=1, seed=2).eval()
    pair = Pair(target, tokenizer, draft_model=draft, strategy="draft")
    kwargs = dict(prompt_ids=[5, 17, 42, 9, 100, 7], max_new_tokens=24, temperature=0.8, seed=3)
    first = pair.generate(**kwargs)
    assert [pair.generate(**kwargs).token_ids for _ in range(2)] == [first.token_ids] * 2
    fresh = Pair(target, tokenizer, draft_model=draft, strategy="draft").generate(**kwargs)
    assert fresh.token_ids == first.token_ids
