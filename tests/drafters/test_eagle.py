"""EAGLE heads (EAGLE-1 and EAGLE-3, full and reduced draft vocabulary) draft losslessly: greedy output is
the target's own generate(), sampled output has the target's distribution, and the head drafts from the
target's TRUE features of the committed context (its chain never stays in its cache)."""

from __future__ import annotations

import io
import json
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from conftest import make_model
from rich.console import Console
from test_lossless_sampling import exact_joint, g_test_pvalue
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

import specli
from specli.cli import app
from specli.drafters.eagle import EagleDrafter
from specli.engine.events import TokenKind
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig
from specli.engine.stopping import StopCriteria
from specli.errors import ModelLoadError
from specli.models.cached_lm import CachedLM
from specli.models.eagle_head import EagleHead, HeadCache, init_weights
from specli.models.head_formats import save_head
from specli.render.explain import ExplainView
from specli.render.live import TokenView
from specli.training.eagle import head_config, set_vocabulary

ARCHS = ["llama", "qwen2", "qwen3"]
HEADS = ["eagle1", "eagle3", "eagle3-reduced"]


def reduced_vocabulary(vocab: int, seed: int) -> torch.Tensor:
    """The target ids of make_head's reduced draft vocabulary (a random 3/4 of vocab, ascending): draft id
    i is the i-th of them. Known from how the head was built, not read back through its d2t."""
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randperm(vocab, generator=g)[: vocab * 3 // 4].sort().values


def make_head(target, which: str, seed: int = 0, std: float = 0.05) -> EagleHead:
    """A random head shaped for target; 'eagle3-reduced' drafts over reduced_vocabulary(vocab, seed)."""
    kind = which.split("-")[0]
    vocab = target.get_output_embeddings().weight.shape[0]
    reduced = which.endswith("reduced")
    config = head_config(target, kind, vocab * 3 // 4 if reduced else vocab, 96)
    head = init_weights(EagleHead(config), std=std, seed=seed).eval()
    if reduced:
        set_vocabulary(head, reduced_vocabulary(vocab, seed))
    return head


def vocabulary_from_mask(head: EagleHead) -> torch.Tensor | None:
    """The target id of each draft id [V_draft], from the head's t2d mask (the test heads' draft
    vocabularies are ascending target ids, as set_vocabulary writes them); None for a full vocabulary.
    Independent of d2t and of head.draft_to_target(), which the drafter uses."""
    if not head.config.reduced_vocab:
        return None
    ids = torch.nonzero(head.t2d).flatten()
    assert ids.numel() == head.config.draft_vocab_size
    return ids


def to_target_ids(head: EagleHead, choice: torch.Tensor) -> list[int]:
    """Draft ids -> target ids through vocabulary_from_mask (never through d2t)."""
    ids = vocabulary_from_mask(head)
    return (ids[choice] if ids is not None else choice).reshape(-1).tolist()


def target_features(target, layers, ids: list[int]) -> torch.Tensor:
    """The target's features [n, F] of ids (its hidden states entering `layers`, concatenated), from one
    full forward without a cache."""
    with torch.no_grad():
        hidden = target(torch.tensor([ids]), output_hidden_states=True).hidden_states
    return torch.cat([hidden[i][0] for i in layers], -1)


def fit_to_target(head: EagleHead, target, prompt: list[int], n: int = 30, steps: int = 40) -> EagleHead:
    """Fit the head (all its weights, a fraction of a second) to the target's greedy continuation of
    prompt: slot t reads (feature of x_t, x_{t+1}) and learns x_{t+2}, for every slot of that text. Its
    first draft of each round is then right (where the token lies in its draft vocabulary), its chain
    mostly not: rounds accept some drafts and reject others, and the drafts still depend on every
    feature and token the head is given."""
    context = prompt + reference(target, prompt, n)
    features = target_features(target, head.config.aux_layers, context[:-1])  # [T-1, F]
    embed = getattr(head, "embed_tokens", None)
    embed = embed if embed is not None else target.get_input_embeddings()
    with torch.no_grad():
        embeds = embed(torch.tensor(context[1:]))  # [T-1, H]
    lm_head = target.get_output_embeddings()
    frozen = torch.nn.Linear(lm_head.in_features, lm_head.out_features, bias=False).requires_grad_(False)
    frozen.weight.copy_(lm_head.weight.detach())  # eagle1 drafts through it; it is not fitted
    labels = torch.tensor(context[2:])  # slot t's next-but-one token
    ids = vocabulary_from_mask(head)
    if ids is not None:  # draft ids; tokens outside the draft vocabulary are not learned
        lookup = torch.full((head.config.target_vocab_size,), -100)
        lookup[ids] = torch.arange(ids.numel())
        labels = lookup[labels]
    head.train()
    optimizer = torch.optim.Adam(head.parameters(), lr=1e-2)
    positions = torch.arange(len(context) - 1)
    for _ in range(steps):
        states = head.step(embeds, head.fuse(features), positions, HeadCache())  # [T-1, H]
        loss = F.cross_entropy(head.draft_logits(states[:-1], frozen), labels, ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return head.eval()


def reference(target, prompt: list[int], n: int) -> list[int]:
    out = target.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


@pytest.fixture(scope="module", params=ARCHS)
def target(request):
    return make_model(request.param, 384, layers=5, seed=4, eos_token_id=None).eval()


@pytest.mark.parametrize("which", HEADS)
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_identity(target, which, k):
    head = make_head(target, which)
    for prompt in ([3, 44, 17, 250, 9, 81, 12], [7]):
        expected = reference(target, prompt, 24)
        config = EngineConfig(max_new_tokens=24, num_draft_tokens=k)
        rounds = list(
            generate_rounds(CachedLM(target), EagleDrafter(head, target), prompt, config, StopCriteria(set()))
        )
        assert [t for r in rounds for t in r.committed] == expected, (which, k, prompt)
        assert sum(len(r.drafted) for r in rounds) > 0


def independent_drafts(target, head: EagleHead, context: list[int], k: int) -> list[int]:
    """What the head drafts after `context` from scratch: the target's features of context[:-1] in one
    full forward, the head over every (feature, next token) pair, then its greedy chain of k. Draft ids
    become target ids through the t2d mask, not through the head's own d2t mapping."""
    with torch.no_grad():
        hidden = target(torch.tensor([context[:-1]]), output_hidden_states=True).hidden_states
        features = torch.cat([hidden[i][0] for i in head.config.aux_layers], -1)
        embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
        cache = HeadCache()
        n = len(context) - 1
        state = head.step(embed(torch.tensor(context[1:])), head.fuse(features), torch.arange(n), cache)[-1:]
        drafted = []
        for i in range(k):
            (token,) = to_target_ids(head, head.draft_logits(state, lm_head)[-1].argmax())
            drafted.append(token)
            state = head.step(embed(torch.tensor([token])), state, torch.tensor([n + i]), cache)
    return drafted


def check_rounds_against_recomputation(rounds, prompt: list[int], fresh) -> None:
    """Each round's drafts equal fresh(context, k), the head recomputed from scratch over the committed
    context; rounds accepted drafts (and a later round was checked after each such commit) and rejected
    drafts, so a commit that loses the features of accepted drafts is seen."""
    context, after_accept, previous = list(prompt), 0, None
    outcomes = set()
    for r in rounds:
        if r.drafted:
            assert r.drafted == fresh(context, len(r.drafted)), r.index
            after_accept += previous is not None and previous.accepted > 0
            outcomes |= {"accepted"} if r.accepted else set()
            outcomes |= {"rejected"} if r.accepted < len(r.drafted) else set()
        context += r.committed
        previous = r
    assert outcomes == {"accepted", "rejected"}
    assert after_accept >= 3


@pytest.mark.parametrize("which", HEADS)
def test_each_round_drafts_from_the_true_features_of_the_committed_context(which):
    """A head whose cache kept its own chain, that continued from its estimates instead of the target's
    features, or that lost the features of the accepted drafts, drafts differently from this
    recomputation. The head is fitted to the target's text, so rounds accept drafts."""
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    prompt = [3, 44, 17, 250, 9, 81, 12]
    head = fit_to_target(make_head(target, which, std=0.2), target, prompt)
    config = EngineConfig(max_new_tokens=30, num_draft_tokens=3)
    drafter = EagleDrafter(head, target)
    rounds = generate_rounds(CachedLM(target), drafter, prompt, config, StopCriteria(set()))
    check_rounds_against_recomputation(rounds, prompt, partial(independent_drafts, target, head))


def check_commit(target, head: EagleHead, accepted: int, fresh, k: int = 3) -> None:
    """The drafter alone, as the engine drives it: prefill features, propose k, the verify forward's
    features of [pending, d_1..d_k], commit(accepted, token). Its next proposal must be fresh(context, k)
    for the context the commit left: prompt + d_1..d_accepted + token."""
    prompt = [3, 44, 17, 250, 9, 81, 12]
    layers = head.config.aux_layers
    drafter = EagleDrafter(head, target)
    drafter.reset(prompt)
    drafter.observe_features(target_features(target, layers, prompt[:-1]))  # the prefill's
    drafts = drafter.propose(k, SamplingConfig(), None).ids.tolist()
    assert len(drafts) == k
    verified = target_features(target, layers, prompt + drafts)[len(prompt) - 1 :]  # [k+1, F]
    drafter.observe_features(verified)
    token = 100 if accepted == k or drafts[accepted] != 100 else 101  # the correction or bonus
    drafter.commit(accepted, token)
    context = prompt + drafts[:accepted] + [token]
    assert drafter.propose(k, SamplingConfig(), None).ids.tolist() == fresh(context, k)


@pytest.mark.parametrize("which", HEADS)
@pytest.mark.parametrize("accepted", [0, 1, 3])
def test_commit_keeps_the_features_of_pending_and_the_accepted_drafts(which, accepted):
    """commit(accepted, token) queues the verify forward's features of pending, d_1..d_accepted, each
    paired with the token after it, and drops the rest (and the chain): the next draft is the head's
    from scratch over the committed context."""
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    head = make_head(target, which, std=0.2)
    check_commit(target, head, accepted, partial(independent_drafts, target, head))


V = 8
PROMPT = [1, 5, 2, 7, 3]
RUNS = 2500


@pytest.mark.parametrize("which", HEADS)
def test_sampling_follows_the_target_distribution(which):
    """First round drafts two tokens (max_new_tokens 3, k 2); the first two tokens' joint matches the
    target's exactly enumerated one. With a reduced vocabulary q is zero outside it."""
    target = make_model("llama", V, layers=3, hidden=32, seed=21, init_range=0.6, eos_token_id=None).eval()
    head = make_head(target, which, seed=3, std=0.6)
    cfg = SamplingConfig(0.9, top_k=6)
    exact = exact_joint(target, cfg)
    lm = CachedLM(target)
    counts, drafted, accepted = torch.zeros(V, V), 0, 0
    for seed in range(RUNS):
        config = EngineConfig(max_new_tokens=3, num_draft_tokens=2, sampling=cfg, seed=seed)
        rounds = list(generate_rounds(lm, EagleDrafter(head, target), PROMPT, config, StopCriteria(set())))
        assert len(rounds[0].drafted) == 2
        tokens = [t for r in rounds for t in r.committed]
        counts[tokens[0], tokens[1]] += 1
        drafted += sum(len(r.drafted) for r in rounds)
        accepted += sum(r.accepted for r in rounds)
    assert 0.05 < accepted / drafted < 0.95  # acceptances and corrections both happen
    assert g_test_pvalue(counts, exact) > 1e-3


def test_reduced_vocabulary_drafts_only_inside_it():
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    head = make_head(target, "eagle3-reduced", std=0.3)
    inside = set(reduced_vocabulary(384, seed=0).tolist())  # as built, not as d2t maps it
    config = EngineConfig(max_new_tokens=20, num_draft_tokens=4, sampling=SamplingConfig(1.0), seed=0)
    rounds = list(
        generate_rounds(CachedLM(target), EagleDrafter(head, target), [5, 6, 7], config, StopCriteria(set()))
    )
    assert all(t in inside for r in rounds for t in r.drafted)
    assert all(r.info["head"] == "eagle3" for r in rounds if r.drafted)


@pytest.fixture(scope="module")
def head_dirs(tiny_pair, tmp_path_factory):
    """An EAGLE-3 (reduced vocabulary) and an EAGLE-1 head for tiny_pair's target, saved as users get them."""
    target = AutoModelForCausalLM.from_pretrained(tiny_pair[0])
    root = tmp_path_factory.mktemp("heads")
    dirs = {}
    for which in ("eagle3-reduced", "eagle1"):
        save_head(make_head(target, which, std=0.2), root / which, verifier=str(tiny_pair[0]))
        dirs[which] = root / which
    return dirs


@pytest.mark.parametrize("which", ["eagle3-reduced", "eagle1"])
def test_api_and_cli_run_a_head_from_disk_losslessly(tiny_pair, head_dirs, which):
    target_dir, draft_dir = tiny_pair
    pair = specli.load(target=str(target_dir), draft=str(head_dirs[which]), strategy="eagle", device="cpu")
    plain = specli.load(target=str(target_dir), strategy="none", device="cpu")
    for p in (pair, plain):
        p.eos_ids = set()
    ids = pair.encode("def fibonacci(n):", chat=False)
    expected = plain.generate(prompt_ids=ids, max_new_tokens=20).token_ids
    result = pair.generate(prompt_ids=ids, max_new_tokens=20, num_draft_tokens=3)
    assert result.token_ids == expected and result.stats.drafted > 0
    assert pair.head_name == str(head_dirs[which])
    if which == "eagle3-reduced":  # drafts mapped through the d2t read from disk: in the vocabulary built
        vocabulary = set(reduced_vocabulary(len(pair.tokenizer), seed=0).tolist())
        assert all(t in vocabulary for r in result.rounds for t in r.drafted)
    out = CliRunner().invoke(
        app,
        ["generate", "def fibonacci(n):", "--target", str(target_dir), "--strategy", "eagle", "--draft",
         str(head_dirs[which]), "--no-chat", "--max-new-tokens", "12", "--json"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["stats"]["strategy"] == "eagle" and data["stats"]["drafted"] > 0


def test_a_head_for_another_target_is_refused_before_weights(tiny_pair, tmp_path):
    other = make_model("llama", 384, layers=4, hidden=48, seed=9)  # hidden 48, the target's is 64
    save_head(make_head(other, "eagle3"), tmp_path / "head")
    (tmp_path / "head" / "model.safetensors").write_bytes(b"not weights")  # never opened
    with pytest.raises(ModelLoadError, match="hidden size"):
        specli.load(target=str(tiny_pair[0]), draft=str(tmp_path / "head"), strategy="eagle", device="cpu")


def test_views_name_the_target_layers_and_tokens_outside_the_draft_vocabulary(tiny_pair, head_dirs):
    """explain says which target layers fed the head, and when the target's correction lies outside a
    reduced draft vocabulary; the live status names the head and its layers."""
    pair = specli.load(
        target=str(tiny_pair[0]), draft=str(head_dirs["eagle3-reduced"]), strategy="eagle", device="cpu"
    )
    pair.eos_ids = set()
    ids = pair.encode("def fibonacci(n):", chat=False)
    rounds = list(pair.stream(prompt_ids=ids, max_new_tokens=60, num_draft_tokens=3, record_top=3))
    vocab = set(reduced_vocabulary(len(pair.tokenizer), seed=0).tolist())  # as built, not through d2t
    outside = [r for r in rounds if r.kind is TokenKind.CORRECTION and r.token not in vocab]
    inside = [r for r in rounds if r.kind is TokenKind.CORRECTION and r.token in vocab]
    assert outside and inside  # a 3/4 vocabulary: both happen in 60 tokens
    assert all(r.info["token_in_draft_vocab"] is False for r in outside)
    assert all(r.info["token_in_draft_vocab"] is True for r in inside)
    layers = ", ".join(str(i) for i in pair.head.config.aux_layers)
    view = ExplainView(pair.tokenizer, "eagle", 3, greedy=True, top=3, prompt_ids=ids)
    console = Console(record=True, width=100, file=io.StringIO())
    for r in (outside[0], inside[0]):
        console.print(view.panel(r))
    text = console.export_text()
    assert f"EAGLE-3 head proposed 3 tokens from the target's hidden states entering layers {layers}" in text
    assert text.count("outside the head's 288-token draft vocabulary") == 1  # the outside one only
    live = TokenView(pair.tokenizer, "eagle", 3)
    for r in rounds:
        live.add(r)
    status = Console(record=True, width=200, file=io.StringIO())
    status.print(live.status())
    assert f"eagle k=3 (EAGLE-3 on layers {layers.replace(' ', '')})" in status.export_text()


def test_quick_training_recipe_writes_heads_that_load_and_stay_lossless(tmp_path):
    """`python -m specli.training.eagle --quick`: both heads, in the speculators layout, loadable by the
    user's path, lossless on the embedded target."""
    from specli.training.eagle import main as train

    assert train(["--out", str(tmp_path), "--quick", "--threads", "1"]) == 0
    config = json.loads((tmp_path / "tiny-eagle3" / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["draft_vocab_size"] == 256
    assert json.loads((tmp_path / "tiny-eagle1" / "config.json").read_text())["specli_head_type"] == "eagle1"
    plain = specli.load(strategy="none", device="cpu").generate("def parse(line):", max_new_tokens=12)
    for kind in ("eagle3", "eagle1"):
        pair = specli.load(strategy="eagle", draft=str(tmp_path / f"tiny-{kind}"), device="cpu")
        result = pair.generate("def parse(line):", max_new_tokens=12)
        assert result.token_ids == plain.token_ids and result.stats.drafted > 0


def test_a_llama3_scaled_rope_head_rotates_as_transformers_and_round_trips(tmp_path):
    """Llama-3.1/3.3 heads carry rope_scaling (rope_type llama3): the head rotates exactly as
    transformers' LlamaRotaryEmbedding, and the setting survives save -> load."""
    from dataclasses import replace

    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    from specli.models.head_formats import load_head

    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_type": "llama3"}  # fmt: skip
    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None)
    config = replace(head_config(target, "eagle3", 384, 96), rope_theta=500000.0, rope_scaling=scaling)
    head = init_weights(EagleHead(config), seed=2).eval()
    save_head(head, tmp_path / "h")
    loaded = load_head(tmp_path / "h", target.config)
    assert loaded.config.rope_scaling == scaling
    reference = LlamaRotaryEmbedding(
        LlamaConfig(
            hidden_size=config.hidden_size, num_attention_heads=config.num_heads, head_dim=config.head_dim,
            max_position_embeddings=config.max_position_embeddings,
            rope_parameters={**scaling, "rope_theta": 500000.0},
        )
    )  # fmt: skip
    x = torch.randn(1, config.num_heads, 7, config.head_dim, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(40, 47)
    cos, sin = reference(x, positions[None])
    expected, _ = apply_rotary_pos_emb(x, x, cos, sin)
    torch.testing.assert_close(loaded.layer.rope(x, positions), expected)
    plain = replace(config, rope_scaling=None)
    assert not torch.allclose(EagleHead(plain).layer.rope(x, positions), expected)  # scaling matters
