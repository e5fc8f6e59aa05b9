"""Parallel drafting (docs/design.md §10): a PARD-style draft model and a P-EAGLE head draft all k tokens in
one forward; the output stays the target's own, greedy and sampled."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from functools import partial

import pytest
import torch
from conftest import make_model, save_model
from test_eagle import (
    check_commit,
    check_rounds_against_recomputation,
    fit_to_target,
    reference,
    to_target_ids,
)
from test_lossless_sampling import exact_joint, g_test_pvalue

import specli
from specli.drafters.draft_model import DraftModelDrafter, parallel_mask_token
from specli.drafters.eagle import EagleDrafter
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig
from specli.engine.stopping import StopCriteria
from specli.errors import ModelLoadError
from specli.models.cached_lm import CachedLM
from specli.models.eagle_head import EagleHead, HeadCache, init_weights
from specli.models.head_formats import load_head, save_head
from specli.training.eagle import head_config, set_vocabulary

PROMPTS = ([3, 44, 17, 250, 9, 81, 12], [7])


def make_pard(arch: str, vocab: int = 384, seed: int = 2, layers: int = 1, **kw):
    """A random draft model marked as PARD does it: `pard_token` names an existing embedding row."""
    model = make_model(arch, vocab, layers=layers, seed=seed, eos_token_id=None, **kw)
    model.config.pard_token = vocab - 1
    return model


def make_peagle(target, seed: int = 0, std: float = 0.05, reduced: bool = False) -> EagleHead:
    """A random P-EAGLE head for target: eagle3 + mask token, its own embeddings, a random mask_hidden."""
    vocab = target.get_output_embeddings().weight.shape[0]
    config = head_config(target, "eagle3", vocab * 3 // 4 if reduced else vocab, 96)
    config = replace(config, mask_token_id=vocab - 2, own_embeddings=True)
    head = init_weights(EagleHead(config), std=std, seed=seed).eval()
    g = torch.Generator().manual_seed(seed + 5)
    with torch.no_grad():
        head.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
        head.mask_hidden.copy_(torch.randn(head.mask_hidden.shape, generator=g) * 0.5)
    if reduced:
        ids = torch.randperm(vocab, generator=g)[: config.draft_vocab_size].sort().values
        set_vocabulary(head, ids)
    return head


def run(target, drafter, prompt, k, n=24, sampling=None, seed=None):
    config = EngineConfig(
        max_new_tokens=n, num_draft_tokens=k, sampling=sampling or SamplingConfig(), seed=seed
    )
    return list(generate_rounds(CachedLM(target), drafter, prompt, config, StopCriteria(set())))


@pytest.fixture(scope="module", params=["llama", "qwen2", "qwen3"])
def target(request):
    return make_model(request.param, 384, layers=5, seed=4, eos_token_id=None).eval()


# --------------------------------------------------------------------------- PARD (draft model)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_pard_greedy_output_is_the_targets(target, k):
    arch = target.config.model_type
    for drafter_model in (make_pard(arch), _self_pard(target)):
        drafter = DraftModelDrafter(CachedLM(drafter_model), 384, mask_token=drafter_model.config.pard_token)
        for prompt in PROMPTS:
            rounds = run(target, drafter, prompt, k)
            assert [t for r in rounds for t in r.committed] == reference(target, prompt, 24), (k, prompt)
            drafted = [r for r in rounds if r.drafted]
            assert drafted and all(
                r.info == {"parallel": True, "mask_inputs": len(r.drafted) - 1} for r in drafted
            )


def _self_pard(target):
    """The target itself, marked as a PARD drafter: d_1 is always right, the masked positions are not."""
    clone = make_model(target.config.model_type, 384, layers=5, seed=4, eos_token_id=None)
    clone.config.pard_token = 383
    return clone


def independent_pard_drafts(model, context: list[int], k: int, mask: int) -> list[int]:
    """What a PARD drafter drafts after `context` from scratch: one causal forward over context + k-1
    masks; the last k positions' argmax."""
    with torch.no_grad():
        logits = model(torch.tensor([context + [mask] * (k - 1)])).logits[0, -k:]
    return logits.argmax(-1).tolist()


def test_pard_drafts_only_from_committed_tokens():
    """Each round's drafts equal a from-scratch forward over the committed context and fresh masks: a
    cache that kept the masks, or lost an accepted draft, drafts something else."""
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    model = _self_pard(target).eval()  # accepts often, so rounds end both ways
    drafter = DraftModelDrafter(CachedLM(model), 384, mask_token=383)
    prompt = [3, 44, 17, 250, 9, 81, 12]
    context, outcomes = list(prompt), set()
    for r in run(target, drafter, prompt, 4, n=40):
        if r.drafted:
            assert r.drafted == independent_pard_drafts(model, context, len(r.drafted), 383), r.index
            outcomes.add(r.accepted == len(r.drafted))
        context += r.committed
    assert outcomes == {True, False}


def test_pard_runs_one_drafter_forward_per_round():
    target = make_model("llama", 384, layers=3, seed=4, eos_token_id=None).eval()
    model = make_pard("llama")
    lm = CachedLM(model)
    calls = []
    forward = lm.forward
    lm.forward = lambda ids, cache, **kw: calls.append(ids.numel()) or forward(ids, cache, **kw)
    rounds = run(target, DraftModelDrafter(lm, 384, mask_token=383), [5, 6, 7, 8], 6, n=20)
    drafting = [r for r in rounds if r.drafted]
    assert len(calls) == len(drafting) + 1  # the reset's prefill, then one forward per round
    assert len(drafting[0].drafted) == 6 and len(calls) < sum(len(r.drafted) for r in drafting)


@pytest.mark.parametrize("kind", ["pard", "peagle"])
def test_parallel_sampling_follows_the_target_distribution(kind):
    """The first round drafts two tokens in one forward; position 2's q is its own distribution, not
    position 1's and not one conditioned on d_1. The first two tokens' joint matches the target's."""
    v = 8
    target = make_model("llama", v, layers=3, hidden=32, seed=21, init_range=0.6, eos_token_id=None).eval()
    cfg = SamplingConfig(0.9, top_k=6)
    exact = exact_joint(target, cfg)
    if kind == "pard":
        model = make_pard("llama", v, seed=5, layers=2, hidden=32, init_range=0.6)
        drafter = DraftModelDrafter(CachedLM(model), v, mask_token=model.config.pard_token)
    else:
        drafter = EagleDrafter(make_peagle(target, seed=3, std=0.6), target)
    counts, drafted, accepted = torch.zeros(v, v), 0, 0
    for seed in range(2500):
        rounds = run(target, drafter, [1, 5, 2, 7, 3], 2, n=3, sampling=cfg, seed=seed)
        assert len(rounds[0].drafted) == 2 and rounds[0].info["parallel"]
        tokens = [t for r in rounds for t in r.committed]
        counts[tokens[0], tokens[1]] += 1
        drafted += sum(len(r.drafted) for r in rounds)
        accepted += sum(r.accepted for r in rounds)
    assert 0.05 < accepted / drafted < 0.95
    assert g_test_pvalue(counts, exact) > 1e-3


# --------------------------------------------------------------------------- P-EAGLE (head)


@pytest.mark.parametrize("reduced", [False, True])
@pytest.mark.parametrize("k", [1, 4])
def test_peagle_greedy_output_is_the_targets(target, reduced, k):
    head = make_peagle(target, reduced=reduced)
    for prompt in PROMPTS:
        rounds = run(target, EagleDrafter(head, target), prompt, k)
        assert [t for r in rounds for t in r.committed] == reference(target, prompt, 24), (k, prompt)
        drafted = [r for r in rounds if r.drafted]
        assert drafted and all(r.info["head"] == "peagle" and r.info["parallel"] for r in drafted)
        assert all(r.info["mask_inputs"] == len(r.drafted) - 1 for r in drafted)


def independent_peagle_drafts(target, head: EagleHead, context: list[int], k: int) -> list[int]:
    """From scratch: the target's features of context[:-1], the head over every (feature, next token)
    pair followed by k-1 placeholders (mask embedding, fc(mask_hidden)), argmax of the last k outputs."""
    with torch.no_grad():
        hidden = target(torch.tensor([context[:-1]]), output_hidden_states=True).hidden_states
        features = torch.cat([hidden[i][0] for i in head.config.aux_layers], -1)
        n = len(context) - 1
        tokens = torch.tensor(context[1:] + [head.config.mask_token_id] * (k - 1))
        fill = torch.cat([head.fuse(features), head.placeholders(k - 1)])
        states = head.step(head.embed_tokens(tokens), fill, torch.arange(n + k - 1), HeadCache())
        choice = head.draft_logits(states[n - 1 :]).argmax(-1)
    return to_target_ids(head, choice)  # through the t2d mask, not the head's d2t


@pytest.mark.parametrize("reduced", [False, True], ids=["full", "reduced"])
def test_peagle_drafts_from_the_true_features_and_fresh_placeholders(reduced):
    """Each round's drafts equal the head over the committed context's true features and fresh
    placeholders. The head is fitted to the target's text, so rounds accept drafts (a commit that lost
    the accepted drafts' features would show) and reject others."""
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    prompt = [3, 44, 17, 250, 9, 81, 12]
    head = fit_to_target(make_peagle(target, std=0.2, reduced=reduced), target, prompt)
    check_rounds_against_recomputation(
        run(target, EagleDrafter(head, target), prompt, 3, n=30),
        prompt,
        partial(independent_peagle_drafts, target, head),
    )


@pytest.mark.parametrize("accepted", [0, 1, 3])
def test_peagle_commit_keeps_the_features_of_pending_and_the_accepted_drafts(accepted):
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    head = make_peagle(target, std=0.2, reduced=True)
    check_commit(target, head, accepted, partial(independent_peagle_drafts, target, head))


def test_peagle_runs_one_head_forward_per_round():
    target = make_model("llama", 384, layers=3, seed=4, eos_token_id=None).eval()
    head = make_peagle(target)
    calls = []
    step = head.step
    head.step = lambda *a, **kw: calls.append(a[0].shape[0]) or step(*a, **kw)
    rounds = run(target, EagleDrafter(head, target), [5, 6, 7, 8], 6, n=20)
    assert len(calls) == sum(1 for r in rounds if r.drafted)


# --------------------------------------------------------------------------- formats and loading


@pytest.fixture(scope="module")
def parallel_dirs(tiny_pair, tmp_path_factory, tokenizer):
    """A PARD drafter (pard_token, no recorded K) and a P-EAGLE head (speculative_tokens 6) for tiny_pair's
    target, saved as users get them."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("parallel")
    target = AutoModelForCausalLM.from_pretrained(tiny_pair[0])
    vocab = len(tokenizer)
    pard = make_model("llama", vocab, layers=1, seed=9)
    pard.config.pard_token = vocab - 1
    pard.config.spd_type = "pard"
    save_model(root / "pard", pard, tokenizer)
    save_head(make_peagle(target, std=0.2), root / "peagle", verifier=str(tiny_pair[0]), speculative_tokens=6)
    return root / "pard", root / "peagle"


def test_peagle_folder_is_speculators_layout_and_round_trips(tiny_pair, parallel_dirs):
    from safetensors import safe_open

    folder = parallel_dirs[1]
    data = json.loads((folder / "config.json").read_text())
    assert data["speculators_model_type"] == "peagle" and data["architectures"] == ["PEagleSpeculator"]
    assert data["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 6
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        hidden = data["target_hidden_size"] * len(data["eagle_aux_hidden_state_layer_ids"])
        assert f.get_slice("mask_hidden").get_shape() == [1, 1, hidden]
        assert "embed_tokens.weight" in f.keys()  # noqa: SIM118
    head = load_head(folder)
    assert head.config.parallel and head.config.mask_token_id == data["mask_token_id"]
    assert head.config.extra["speculative_tokens"] == 6


def test_broken_peagle_heads_are_refused(tiny_pair, parallel_dirs, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    source = parallel_dirs[1]
    data = json.loads((source / "config.json").read_text())
    cases = {
        "no mask token": ({k: v for k, v in data.items() if k != "mask_token_id"}, None, "mask_token_id"),
        "mask outside": ({**data, "mask_token_id": 10**6}, None, "outside the vocabulary"),
        "no mask_hidden": (data, "mask_hidden", "missing mask_hidden"),
    }
    for name, (config, drop, message) in cases.items():
        folder = tmp_path / name.replace(" ", "_")
        shutil.copytree(source, folder)
        (folder / "config.json").write_text(json.dumps(config))
        if drop:
            state = load_file(str(folder / "model.safetensors"))
            save_file({k: v for k, v in state.items() if k != drop}, str(folder / "model.safetensors"))
        with pytest.raises(ModelLoadError, match=message):
            specli.load(target=str(tiny_pair[0]), draft=str(folder), strategy="eagle", threads=None)


def test_parallel_drafters_bring_their_default_k_and_stay_lossless(tiny_pair, parallel_dirs, tokenizer):
    pard_dir, peagle_dir = parallel_dirs
    prompt = "def fibonacci(n):"
    for strategy, draft, k in (("draft", pard_dir, 8), ("eagle", peagle_dir, 6)):
        pair = specli.load(target=str(tiny_pair[0]), draft=str(draft), strategy=strategy, threads=None)
        assert pair.parallel and pair.settings().num_draft_tokens == k
        assert pair.settings(num_draft_tokens=3).num_draft_tokens == 3  # the caller's k wins
        ids = pair.encode(prompt)
        result = pair.generate(prompt_ids=ids, max_new_tokens=20)
        assert result.token_ids == reference(pair.target_model, ids, 20)[: len(result.token_ids)]
        assert any(r.info.get("parallel") for r in result.rounds)
    plain = specli.load(target=str(tiny_pair[0]), draft=str(tiny_pair[1]), threads=None)
    assert not plain.parallel and plain.settings().num_draft_tokens == 4


def test_pard_markers():
    from types import SimpleNamespace

    from specli.drafters.draft_model import parallel_draft_tokens

    assert parallel_mask_token(SimpleNamespace(pard_token=7)) == 7
    assert parallel_mask_token(SimpleNamespace(ptd_token_id=9)) == 9  # vLLM's other name for it
    assert parallel_mask_token(SimpleNamespace(vocab_size=9)) is None
    assert parallel_draft_tokens(SimpleNamespace(pard_token=7, para_num=5)) == 5
    assert parallel_draft_tokens(SimpleNamespace(pard_token=7)) == 8
    assert parallel_draft_tokens(SimpleNamespace()) is None


# --------------------------------------------------------------------------- training


def test_pard_packed_training_layout_equals_the_inference_layout():
    """Training packs (anchor, depth) queries with a custom mask; each must compute exactly what the
    drafter computes at inference over [context up to the anchor, MASK x depth]."""
    from specli.training.pard import pack, parallel_logits

    model = make_pard("llama", 384, layers=2, seed=3)
    window = torch.randint(0, 383, (1, 20), generator=torch.Generator().manual_seed(0))
    layout = pack(20, 5, 0.6, torch.Generator().manual_seed(1))
    assert (layout.offset > 0).sum() < 4 * 20  # conditional drop kept fewer masks than every anchor
    with torch.no_grad():
        packed = parallel_logits(model, window, layout, 383)[0]
        for i in torch.nonzero(layout.offset > 0).flatten()[::3].tolist():
            t, j = int(layout.anchor[i]), int(layout.offset[i])
            alone = model(torch.cat([window[0, : t + 1], torch.full((j,), 383)])[None]).logits[0, -1]
            torch.testing.assert_close(packed[i], alone, atol=1e-4, rtol=1e-4)


def test_peagle_packed_training_layout_equals_the_inference_layout():
    from specli.training.eagle import target_pass
    from specli.training.pard import pack
    from specli.training.peagle import packed_inputs, packed_states

    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    head = make_peagle(target, std=0.2)
    window = torch.randint(0, 384, (1, 16), generator=torch.Generator().manual_seed(0))
    layout = pack(15, 4, 0.7, torch.Generator().manual_seed(2))
    with torch.no_grad():
        features, _ = target_pass(target, window, head.config.aux_layers)
        states = packed_states(head, *packed_inputs(head, window, features, layout), layout)[0]
        for i in range(0, layout.anchor.numel(), 4):
            t, j = int(layout.anchor[i]), int(layout.offset[i])
            tokens = torch.cat([window[0, 1 : t + 2], torch.full((j,), head.config.mask_token_id)])
            fill = torch.cat([head.fuse(features[0, : t + 1]), head.placeholders(j)])
            alone = head.step(head.embed_tokens(tokens), fill, torch.arange(t + 1 + j), HeadCache())[-1]
            torch.testing.assert_close(states[i], alone, atol=1e-4, rtol=1e-4)


def test_quick_recipes_write_parallel_drafters_that_load_and_stay_lossless(tmp_path):
    """`python -m specli.training.pard --quick` and `... peagle --quick`: a PARD drafter (pard_token, one
    more embedding row) and a P-EAGLE head in the speculators layout, loadable by the user's path and
    lossless on the embedded target."""
    from specli.training.pard import main as train_pard
    from specli.training.peagle import main as train_peagle

    assert train_pard(["--out", str(tmp_path), "--quick", "--threads", "1"]) == 0
    assert train_peagle(["--out", str(tmp_path), "--quick", "--threads", "1"]) == 0
    config = json.loads((tmp_path / "tiny-pard" / "config.json").read_text())
    assert config["pard_token"] == 4096 and config["vocab_size"] == 4097 and config["para_num"] == 8
    assert (
        json.loads((tmp_path / "tiny-peagle" / "config.json").read_text())["speculators_model_type"]
        == "peagle"
    )
    plain = specli.load(strategy="none", device="cpu").generate("def parse(line):", max_new_tokens=12)
    for strategy, name in (("draft", "tiny-pard"), ("eagle", "tiny-peagle")):
        pair = specli.load(target="embedded:tiny-target", draft=str(tmp_path / name), strategy=strategy)
        assert pair.parallel and pair.settings().num_draft_tokens == 8
        result = pair.generate("def parse(line):", max_new_tokens=12)
        assert result.token_ids == plain.token_ids and result.stats.drafted > 0


# --------------------------------------------------------------------------- views


@pytest.mark.parametrize("strategy", ["draft", "eagle"])
def test_views_show_a_parallel_round_as_one_pass_with_mask_inputs(tiny_pair, parallel_dirs, strategy):
    """explain: one drafter pass, the input of every position (the last token, then MASK), q and p when
    sampling, and where acceptance broke; the live status says the drafting is parallel."""
    import io

    from rich.console import Console

    from specli.render.explain import ExplainView
    from specli.render.live import TokenView

    draft = parallel_dirs[0] if strategy == "draft" else parallel_dirs[1]
    pair = specli.load(target=str(tiny_pair[0]), draft=str(draft), strategy=strategy, threads=None)
    pair.eos_ids = set()
    ids = pair.encode("def fibonacci(n):", chat=False)
    for greedy in (True, False):
        settings = dict(max_new_tokens=24, num_draft_tokens=4, record_top=3)
        settings |= {} if greedy else dict(temperature=0.8, seed=3)
        rounds = [r for r in pair.stream(prompt_ids=ids, **settings) if len(r.drafted) == 4]
        view = ExplainView(pair.tokenizer, strategy, 4, greedy=greedy, top=3, prompt_ids=ids)
        console = Console(record=True, width=120, file=io.StringIO())
        console.print(view.panel(rounds[0]))
        text = console.export_text()
        assert "proposed 4 tokens in ONE forward" in text
        assert "positions 2-4 read MASK placeholders" in text
        rows = [line for line in text.splitlines() if re.match(r"│ [1-4]  ", line)]  # the table's rows
        assert len(rows) == 4 and "last token" in rows[0] and all("MASK" in row for row in rows[1:])
        if not greedy:
            assert "q(x)" in text and "p(x)" in text
        if rounds[0].accepted < 4:
            assert f"Position {rounds[0].accepted + 1} was rejected" in text
    live = TokenView(pair.tokenizer, strategy, 4)
    live.add(rounds[0])
    status = Console(record=True, width=200, file=io.StringIO())
    status.print(live.status())
    expected = "parallel: 1 pass per round" if strategy == "draft" else "P-EAGLE on layers"
    assert expected in status.export_text()
