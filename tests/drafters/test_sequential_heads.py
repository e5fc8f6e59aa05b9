"""Sequential heads (Hydra's form: each head also reads the token before its own): greedy output is the
target's own generate() id for id (random and fitted heads, chains and trees, two architectures); each
round's chain and each tree node's children are the heads applied to the right state and token,
recomputed from scratch; training's teacher forcing feeds head i the token drafting feeds it; sampled
output follows the target's distribution (G-test, chains and drawn trees) and the same test catches a
drafter reporting the wrong q; the folder round-trips and no serving engine is handed them."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import make_model
from test_heads import ARCHS, CFG, PROMPT, RUNS, SAMPLED_PROMPT, V, fitted_heads, reference, run, run_tree
from test_lossless_sampling import exact_joint, g_test_pvalue
from typer.testing import CliRunner

import specli
from specli.cli import app
from specli.drafters.heads import HeadsDrafter
from specli.engine.drafter import Drafts
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig, process_logits
from specli.engine.stopping import StopCriteria
from specli.errors import ModelLoadError, UsageError
from specli.models.blockwise_heads import (
    BlockwiseHeads,
    HeadsConfig,
    load_heads,
    read_config,
    save_heads,
    token_inputs,
)
from specli.models.cached_lm import CachedLM
from specli.training.heads import teacher_tokens

K = 4


def sequential_heads(target, k: int = K, seed: int = 0, std: float = 0.3) -> BlockwiseHeads:
    """k sequential heads with random blocks (zero blocks would ignore the tokens they read)."""
    torch.manual_seed(seed)
    heads = BlockwiseHeads(HeadsConfig(k, target.config.hidden_size, sequential=True))
    for block in heads.heads:
        torch.nn.init.normal_(block.linear.weight, std=std)
        torch.nn.init.normal_(block.linear.bias, std=std)
    return heads.eval()


@pytest.fixture(scope="module", params=ARCHS)
def target(request):
    return make_model(request.param, 384, layers=4, seed=4, eos_token_id=None).eval()


@pytest.fixture(scope="module")
def fitted(target):
    return fitted_heads(target, PROMPT, steps=80, sequential=True, k=K)


def committed(rounds) -> list[int]:
    return [t for r in rounds for t in r.committed]


@pytest.mark.parametrize("k", [1, 3, 4])
def test_greedy_identity_with_random_and_fitted_sequential_heads(target, fitted, k):
    """Random heads (mostly refused drafts) and fitted ones (several kept a round): generate()'s output,
    also from a one-token prompt (plain steps until a verify forward gives a state)."""
    for prompt in (PROMPT, [7]):
        rounds = run(target, sequential_heads(target), k, 24, prompt)
        assert committed(rounds) == reference(target, prompt, 24), (k, prompt)
        assert max(len(r.drafted) for r in rounds) == k
    rounds = run(target, fitted, k, 30)
    assert committed(rounds) == reference(target, PROMPT, 30)
    assert all(r.info.get("sequential") for r in rounds if r.drafted)
    if k > 1:
        assert max(r.accepted for r in rounds) >= 2


def chain_from_scratch(target, heads, context: list[int], k: int) -> list[int]:
    """Greedy sequential chain from one full forward without a cache: h at the position before the
    last of context, head 1 reads context[-1], head i the argmax of head i-1."""
    with torch.no_grad():
        hidden = target(torch.tensor([context[:-1]]), output_hidden_states=True).hidden_states[-1][0, -1]
        embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()
        state, token, out = hidden, context[-1], []
        for block in heads.heads[:k]:
            state = block(state, token_inputs(embed(torch.tensor(token))))
            token = int(lm_head(state).argmax())
            out.append(token)
    return out


def test_each_chain_reads_the_pending_token_and_the_drafts_before(target, fitted):
    """Every round's drafts equal the chain recomputed from scratch: a drafter that kept the previous
    round's pending token, or fed head i the state h instead of head i-1's, drafts differently."""
    context, after_accept = list(PROMPT), 0
    rounds = run(target, fitted, 4, 30)
    for r in rounds:
        assert r.drafted == chain_from_scratch(target, fitted, context, len(r.drafted)), r.index
        context += r.committed
    after_accept = sum(r.accepted > 0 for r in rounds[:-1])
    assert after_accept >= 2


@pytest.mark.parametrize("size,width", [(4, 2), (9, 3)])
def test_greedy_identity_with_sequential_trees(target, fitted, size, width):
    for heads in (sequential_heads(target), fitted):
        rounds = run_tree(target, heads, 3, 30, size, width)
        assert committed(rounds) == reference(target, PROMPT, 30)
        assert all(r.tree is not None and r.tree.size > 1 for r in rounds if r.drafted)
    assert max(r.accepted for r in run_tree(target, fitted, 3, 30, size, width)) >= 2


def test_a_tree_nodes_children_come_from_its_own_token_and_state(target):
    """Greedy tree of width 2, depth 3: each node's children are the top 2 of the next head applied to
    the node's own path (recomputed from scratch), so siblings' children differ (Medusa's would not)."""
    heads = sequential_heads(target, k=3, seed=2, std=0.4)
    drafter = HeadsDrafter(heads, target, tree_size=14, tree_width=2)
    drafter.reset(PROMPT)
    with torch.no_grad():
        out = target(torch.tensor([PROMPT[:-1]]), output_hidden_states=True)
    drafter.observe_features(out.hidden_states[-1][0])
    proposal = drafter.propose(3, SamplingConfig(), None, nodes=14)
    tokens, parents = proposal.ids.tolist(), proposal.parents
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()

    def top_after(path: list[int]) -> list[int]:
        with torch.no_grad():
            state = out.hidden_states[-1][0, -1]
            for block, token in zip(heads.heads, [PROMPT[-1], *path], strict=False):
                state = block(state, token_inputs(embed(torch.tensor(token))))
            return lm_head(state).topk(2).indices.tolist()

    def path_of(node: int) -> list[int]:
        path = []
        while node != -1:
            path.insert(0, tokens[node])
            node = parents[node]
        return path

    assert [t for t, p in zip(tokens, parents, strict=True) if p == -1] == top_after([])
    children_sets = set()
    for node, parent in enumerate(parents):
        if parent >= 0:
            kids = [tokens[c] for c, p in enumerate(parents) if p == parent]
            assert kids == top_after(path_of(parent))[: len(kids)], node
            children_sets.add(tuple(sorted(kids)))
    assert len(children_sets) >= 2


def test_training_feeds_each_head_the_token_drafting_feeds_it(target, fitted):
    """heads.states over the teacher tokens, at slot t and head i, equals the drafting chain run along the
    true tokens x_{t+1} .. x_{t+i} (catches an off-by-one in the shifted embeddings)."""
    window = torch.tensor([PROMPT + reference(target, PROMPT, 12)])
    with torch.no_grad():
        hidden = target(window, output_hidden_states=True).hidden_states[-1]  # [1, T, H]
        states = fitted.states(hidden, teacher_tokens(fitted, target, window))  # [K, 1, T, H]
        embed = target.get_input_embeddings()
        for t in (0, 5, 9):
            state = hidden[0, t]
            for i in range(K):
                state = fitted.heads[i](state, token_inputs(embed(window[0, t + 1 + i])))
                torch.testing.assert_close(states[i, 0, t], state)


# --------------------------------------------------------------------------- sampling


class ArgmaxReportingSoftmax(HeadsDrafter):
    """The classic bug (docs/design.md §3.3) in a sequential chain: each head drafts its argmax (and the
    next head reads it) but reports its processed distribution as q."""

    def _propose_sequential(self, k, sampling, generator, info):
        drafts, greedy = Drafts(sampling, generator, self.p_min), Drafts(SamplingConfig(), None)
        state, token = self._hidden[None], torch.tensor([self._pending])
        for i in range(k):
            state, logits = self._head_logits(i, state, self._token_inputs(token))
            token = greedy.take(logits[0])
            drafts.ids.append(token)
            drafts.qs.append(process_logits(logits, sampling)[0])
        return drafts.proposal(info)


@pytest.fixture(scope="module")
def small_target():
    return make_model("llama", V, layers=3, hidden=32, seed=21, init_range=0.6, eos_token_id=None).eval()


def sampled_counts(target, drafter_factory, size: int = 0) -> tuple[torch.Tensor, float]:
    heads = sequential_heads(target, k=2, seed=3, std=0.05)
    lm = CachedLM(target)
    counts, drafted, accepted = torch.zeros(V, V), 0, 0
    for seed in range(RUNS):
        config = EngineConfig(max_new_tokens=2, num_draft_tokens=2, sampling=CFG, seed=seed, fixed_k=True)
        rounds = list(
            generate_rounds(lm, drafter_factory(heads), SAMPLED_PROMPT, config, StopCriteria(set()))
        )
        tokens = committed(rounds)
        counts[tokens[0], tokens[1]] += 1
        drafted += sum(len(r.drafted) for r in rounds)
        accepted += sum(r.accepted for r in rounds)
    return counts, accepted / max(drafted, 1)


@pytest.mark.parametrize("size", [0, 4])
def test_sampled_chains_and_drawn_trees_follow_the_target_distribution(small_target, size):
    """Chains (each head drawn given the draws before it) and drawn trees of width 2: the first two
    tokens' joint is the target's exact one."""
    counts, acceptance = sampled_counts(
        small_target, lambda heads: HeadsDrafter(heads, small_target, tree_size=size, tree_width=2)
    )
    assert 0.05 < acceptance < 0.95
    assert g_test_pvalue(counts, exact_joint(small_target, CFG, SAMPLED_PROMPT)) > 1e-3


def test_control_a_q_that_was_not_drawn_from_fails_the_same_test(small_target):
    counts, _ = sampled_counts(small_target, lambda heads: ArgmaxReportingSoftmax(heads, small_target))
    assert g_test_pvalue(counts, exact_joint(small_target, CFG, SAMPLED_PROMPT)) < 1e-6


# --------------------------------------------------------------------------- folders and engines


def test_sequential_heads_round_trip_and_run_from_disk(tiny_pair, tmp_path):
    """The folder says sequential and holds [H, 2H] blocks; loaded through specli.load they equal plain
    decoding; a config whose `sequential` is not a boolean is refused in one line."""
    target = make_model("llama", 384, layers=4, seed=1)
    heads = sequential_heads(target, k=3)
    folder = save_heads(heads, tmp_path / "seq", str(tiny_pair[0]))
    body = json.loads((folder / "config.json").read_text())["specli_heads"]
    assert body["sequential"] is True
    loaded = load_heads(folder)
    assert loaded.config.sequential and loaded.heads[0].linear.weight.shape == (64, 128)
    for name, tensor in heads.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor.to(torch.bfloat16).float()), name
    pair = specli.load(target=str(tiny_pair[0]), draft=str(folder), strategy="heads", device="cpu")
    plain = specli.load(target=str(tiny_pair[0]), strategy="none", device="cpu")
    for p in (pair, plain):
        p.eos_ids = set()
    ids = pair.encode("def fibonacci(n):", chat=False)
    result = pair.generate(prompt_ids=ids, max_new_tokens=20)
    assert result.token_ids == plain.generate(prompt_ids=ids, max_new_tokens=20).token_ids
    assert result.stats.drafted > 0
    data = json.loads((folder / "config.json").read_text())
    data["specli_heads"]["sequential"] = "yes"
    (folder / "config.json").write_text(json.dumps(data))
    with pytest.raises(ModelLoadError, match="sequential true or false"):
        read_config(folder)


def test_no_engine_is_handed_sequential_heads(tiny_pair, tmp_path):
    """vLLM's Medusa heads read the hidden state alone: the export and its Medusa step refuse sequential
    heads in one line (exit 2) instead of writing a folder that drafts something else."""
    folder = save_heads(sequential_heads(make_model("llama", 384, layers=4, seed=1), k=3), tmp_path / "seq")
    args = ["export", "vllm", "--strategy", "heads", "--draft", str(folder), "--target", str(tiny_pair[0])]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2 and "sequential or MLP heads" in out.output and "--sequential" in out.output
    from specli.models.medusa import write_medusa

    with pytest.raises(UsageError, match="sequential"):
        write_medusa(folder, str(tiny_pair[0]), tmp_path / "medusa")


def test_sequential_is_for_heads_only(tiny_pair, tmp_path):
    out = CliRunner().invoke(
        app,
        ["train", "eagle3", "--target", str(tiny_pair[0]), "--data", "code", "--out", str(tmp_path / "o"),
         "--sequential", "--quick"],
    )  # fmt: skip
    assert out.exit_code == 2 and "--sequential is for heads" in out.output


@pytest.mark.parametrize("sequential", [False, True])
def test_mlp_heads_round_trip_stay_lossless_and_are_not_exported(target, tiny_pair, tmp_path, sequential):
    """Heads whose blocks are MLPs (--intermediate): a fresh block is the identity (down starts at zero),
    greedy output is generate()'s with random weights, the folder keeps up/down and its width, and the
    Medusa step refuses them (vLLM's block is one Linear)."""
    fresh = BlockwiseHeads(HeadsConfig(2, target.config.hidden_size, sequential=sequential, intermediate=96))
    hidden = torch.randn(3, target.config.hidden_size)
    tokens = torch.randn(2, 3, target.config.hidden_size) if sequential else None
    with torch.no_grad():
        assert torch.equal(fresh.states(hidden, tokens)[1], hidden)
    torch.manual_seed(1)
    heads = BlockwiseHeads(HeadsConfig(3, target.config.hidden_size, sequential=sequential, intermediate=96))
    for parameter in heads.parameters():
        torch.nn.init.normal_(parameter, std=0.2)
    heads.eval()
    rounds = run(target, heads, 3, 24)
    assert committed(rounds) == reference(target, PROMPT, 24)
    assert max(len(r.drafted) for r in rounds) == 3
    small = BlockwiseHeads(HeadsConfig(2, 64, sequential=sequential, intermediate=32))
    folder = save_heads(small, tmp_path / "mlp")
    loaded = load_heads(folder)
    assert loaded.config == small.config and loaded.heads[0].up.weight.shape == (
        32,
        128 if sequential else 64,
    )
    assert set(loaded.state_dict()) == {f"heads.{i}.{n}.{p}" for i in range(2) for n in ("up", "down")
                                        for p in ("weight", "bias")}  # fmt: skip
    from specli.models.medusa import write_medusa

    with pytest.raises(UsageError, match="one residual Linear"):
        write_medusa(folder, str(tiny_pair[0]), tmp_path / "medusa")
