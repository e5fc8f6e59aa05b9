"""Strategy `heads` (blockwise parallel decoding, Medusa's heads): greedy output is the target's own
generate() id for id (random and fitted heads, several k, two architectures); each round drafts from the
hidden state that produced the pending token; sampled output follows the target's distribution (G-test),
and the same test catches a drafter reporting the wrong q; a heads folder for another target is refused
in one line before its weights are read; the CLI runs it (and its alias `blockwise`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import make_model
from test_drafter_contract import warped
from test_eagle import make_head
from test_lossless_sampling import exact_joint, g_test_pvalue
from typer.testing import CliRunner

import specli
from specli.cli import app
from specli.drafters.heads import HeadsDrafter
from specli.engine.drafter import Proposal
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig, process_logits
from specli.engine.stopping import StopCriteria
from specli.errors import UsageError
from specli.models.blockwise_heads import BlockwiseHeads, HeadsConfig, load_heads, save_heads
from specli.models.cached_lm import CachedLM
from specli.models.head_formats import save_head
from specli.strategies import STRATEGY_TABLE, Strategy, check_strategy, check_tree
from specli.training.heads import heads_loss

ARCHS = ["llama", "qwen2"]
PROMPT = [3, 44, 17, 250, 9, 81, 12]
K = 5


def random_heads(target, k: int = K, seed: int = 0, std: float = 0.3) -> BlockwiseHeads:
    """k heads with random blocks (an untrained head, zero blocks, only repeats the target's token)."""
    torch.manual_seed(seed)
    heads = BlockwiseHeads(HeadsConfig(k, target.config.hidden_size))
    for block in heads.heads:
        torch.nn.init.normal_(block.linear.weight, std=std)
        torch.nn.init.normal_(block.linear.bias, std=std)
    return heads.eval()


def reference(target, prompt: list[int], n: int) -> list[int]:
    out = target.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


def fitted_heads(
    target, prompt: list[int], n: int = 40, steps: int = 60, sequential: bool = False, k: int = K
) -> BlockwiseHeads:
    """Heads fitted (a second on CPU) with the training loss to the target's greedy continuation of
    prompt: their drafts are then often right, so rounds accept drafts and reject others."""
    heads = BlockwiseHeads(HeadsConfig(k, target.config.hidden_size, sequential=sequential)).train()
    window = torch.tensor([prompt + reference(target, prompt, n)])
    optimizer = torch.optim.Adam(heads.parameters(), lr=1e-2)
    for _ in range(steps):
        loss, _ = heads_loss(heads, target, window)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return heads.eval()


def run(target, heads, k: int, n: int, prompt: list[int] = PROMPT) -> list:
    """The engine's rounds over the target with these heads, every round drafting k (fixed_k)."""
    config = EngineConfig(max_new_tokens=n, num_draft_tokens=k, fixed_k=True)
    drafter = HeadsDrafter(heads, target)
    return list(generate_rounds(CachedLM(target), drafter, prompt, config, StopCriteria(set())))


@pytest.fixture(scope="module", params=ARCHS)
def target(request):
    return make_model(request.param, 384, layers=4, seed=4, eos_token_id=None).eval()


@pytest.fixture(scope="module")
def fitted(target):
    return fitted_heads(target, PROMPT)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_identity_with_random_heads(target, k):
    """Random heads draft mostly wrong tokens: a verify that kept a rejected draft, or a drafter state
    that broke the target's cache, shows up as output unlike generate(). A one-token prompt (no prefill,
    so no hidden state yet) starts with plain steps."""
    heads = random_heads(target)
    for prompt in (PROMPT, [7]):
        rounds = run(target, heads, k, 24, prompt)
        assert [t for r in rounds for t in r.committed] == reference(target, prompt, 24), (k, prompt)
        assert sum(len(r.drafted) for r in rounds) > 0
        assert max(len(r.drafted) for r in rounds) == k


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_identity_with_fitted_heads_that_get_drafts_accepted(target, fitted, k):
    """Fitted heads get drafts accepted (several in a round where k > 1): a commit that mishandles
    accepted drafts (the wrong row of the verify forward's states, the pending token dropped) changes
    the output or loses the acceptance."""
    rounds = run(target, fitted, k, 30)
    assert [t for r in rounds for t in r.committed] == reference(target, PROMPT, 30)
    accepted = [r.accepted for r in rounds]
    assert sum(accepted) > 0
    if k > 1:
        assert max(accepted) >= 2


def drafts_from_scratch(target, heads, context: list[int], k: int) -> list[int]:
    """Head i's argmax over the target's final hidden state at the position before the last of context
    (the one that produced it), from one full forward without a cache."""
    with torch.no_grad():
        hidden = target(torch.tensor([context[:-1]]), output_hidden_states=True).hidden_states[-1][0, -1]
        return heads.logits(hidden, target.get_output_embeddings())[:k].argmax(-1).tolist()


def test_each_round_drafts_from_the_state_that_produced_pending(target, fitted):
    """Every round's drafts equal the heads over the hidden state of the last committed token's
    predecessor, recomputed from scratch: a drafter that kept an older row (row 0 of the verify forward,
    or the prefill's) drafts differently once a round accepted drafts."""
    context, after_accept, previous = list(PROMPT), 0, None
    for r in run(target, fitted, 4, 30):
        assert r.drafted == drafts_from_scratch(target, fitted, context, len(r.drafted)), r.index
        after_accept += previous is not None and previous.accepted > 0
        context += r.committed
        previous = r
    assert after_accept >= 2


def test_untrained_heads_are_the_target_lm_head(target):
    """Zero-initialised blocks are the identity: each fresh head predicts what the LM head predicts (so
    the final hidden state feeds the LM head directly: transformers' last hidden state is post-norm)."""
    heads = BlockwiseHeads(HeadsConfig(3, target.config.hidden_size))
    with torch.no_grad():
        out = target(torch.tensor([PROMPT]), output_hidden_states=True)
        logits = heads.logits(out.hidden_states[-1][0], target.get_output_embeddings())  # [3, T, V]
    for head in logits:
        torch.testing.assert_close(head, out.logits[0])


# --------------------------------------------------------------------------- sampling

V = 8
SAMPLED_PROMPT = [1, 5, 2, 7, 3]
RUNS = 2500
CFG = SamplingConfig(0.9, top_k=6)
SAMPLED_STD = 0.05  # heads near the LM head: acceptance about 0.37 on this target


class ArgmaxReportingSoftmax(HeadsDrafter):
    """The classic bug (docs/design.md §3.3): draft each head's argmax but report its processed
    distribution as q."""

    @torch.no_grad()
    def propose(self, k, sampling, generator, nodes=0):
        if self._hidden is None:
            return Proposal.empty()
        logits = self.heads.logits(self._hidden, self._lm_head)[:k]  # [k, V]
        return Proposal(logits.argmax(-1), process_logits(logits, sampling))


def sampled_joint(
    target, drafter_class, std: float = SAMPLED_STD, heads: BlockwiseHeads | None = None
) -> tuple[torch.Tensor, float]:
    """Counts [V, V] of the first two tokens over RUNS seeds (the first round drafts 2), and the
    acceptance rate; `heads` default: random Medusa heads (k 2, `std`)."""
    heads = heads if heads is not None else random_heads(target, k=2, seed=3, std=std)
    lm = CachedLM(target)
    counts, drafted, accepted = torch.zeros(V, V), 0, 0
    for seed in range(RUNS):
        config = EngineConfig(max_new_tokens=3, num_draft_tokens=2, sampling=CFG, seed=seed, fixed_k=True)
        drafter = drafter_class(heads, target)
        rounds = list(generate_rounds(lm, drafter, SAMPLED_PROMPT, config, StopCriteria(set())))
        assert len(rounds[0].drafted) == 2
        tokens = [t for r in rounds for t in r.committed]
        counts[tokens[0], tokens[1]] += 1
        drafted += sum(len(r.drafted) for r in rounds)
        accepted += sum(r.accepted for r in rounds)
    return counts, accepted / drafted


@pytest.fixture(scope="module")
def small_target():
    return make_model("llama", V, layers=3, hidden=32, seed=21, init_range=0.6, eos_token_id=None).eval()


def test_sampling_follows_the_target_distribution(small_target):
    """Each head's draft drawn from its own processed distribution, reported as q: the first two tokens'
    joint matches the target's exact one (catches a q from another temperature or head, or drafts not
    drawn from the q reported)."""
    counts, acceptance = sampled_joint(small_target, HeadsDrafter)
    assert 0.05 < acceptance < 0.95  # acceptances and corrections both happen
    assert g_test_pvalue(counts, exact_joint(small_target, CFG, SAMPLED_PROMPT)) > 1e-3


def test_control_argmax_drafts_with_softmax_q_fail_the_same_test(small_target):
    """The same G-test rejects heads that draft their argmax while reporting their distribution: the
    test can fail."""
    counts, _ = sampled_joint(small_target, ArgmaxReportingSoftmax)
    assert g_test_pvalue(counts, exact_joint(small_target, CFG, SAMPLED_PROMPT)) < 1e-6


@pytest.mark.parametrize(
    "cfg", [SamplingConfig(0.3), SamplingConfig(2.5, top_k=6), SamplingConfig(2.5, top_p=0.7)]
)
def test_q_is_each_heads_distribution_after_transformers_warpers(small_target, cfg):
    """Proposal.q[i] is transformers' temperature / top-k / top-p warpers and softmax on head i's own
    logits over the prefill's last hidden state, and each draft lies in its support (catches a q at
    temperature 1, or the heads' rows mixed up)."""
    heads = random_heads(small_target, k=3, seed=5, std=0.5)
    drafter = HeadsDrafter(heads, small_target)
    drafter.reset(SAMPLED_PROMPT)
    with torch.no_grad():
        out = small_target(torch.tensor([SAMPLED_PROMPT[:-1]]), output_hidden_states=True)
    drafter.observe_features(out.hidden_states[-1][0])  # the prefill's [n, H]
    proposal = drafter.propose(3, cfg, torch.Generator().manual_seed(0))
    logits = heads.logits(out.hidden_states[-1][0, -1], small_target.get_output_embeddings())  # [3, V]
    for i in range(3):
        expected = warped(logits[i], SAMPLED_PROMPT, cfg)
        torch.testing.assert_close(proposal.q[i], expected, atol=1e-5, rtol=1e-4)
        assert proposal.q[i, proposal.ids[i]] > 0


# --------------------------------------------------------------------------- from disk


@pytest.fixture(scope="module")
def heads_dir(tiny_pair, tmp_path_factory):
    """Random heads for tiny_pair's target (hidden 64), saved as `specli train heads` writes them."""
    target = make_model("llama", 384, layers=4, seed=1)
    return save_heads(random_heads(target, k=3), tmp_path_factory.mktemp("heads") / "h", str(tiny_pair[0]))


def test_heads_round_trip_through_their_folder(heads_dir):
    """save_heads / load_heads keep every block (bfloat16 on disk) and the number of heads (catches a
    writer and reader that disagree on names or shapes)."""
    config = json.loads((heads_dir / "config.json").read_text())
    assert config["specli_heads"]["num_heads"] == 3 and config["specli_heads"]["hidden_size"] == 64
    heads = load_heads(heads_dir)
    assert heads.config.num_heads == 3
    original = random_heads(make_model("llama", 384, layers=4, seed=1), k=3)
    for name, tensor in original.state_dict().items():
        assert torch.equal(heads.state_dict()[name], tensor.to(torch.bfloat16).float()), name


def test_api_and_cli_run_heads_from_disk_losslessly(tiny_pair, heads_dir):
    """specli.load(strategy='heads', draft=FOLDER) drafts K tokens a round (the heads' own k) and equals
    plain decoding; `specli generate --strategy heads` and its alias `blockwise` run and --json names the
    strategy (catches a table line, loader or alias that does not reach the drafter)."""
    target_dir = tiny_pair[0]
    pair = specli.load(target=str(target_dir), draft=str(heads_dir), strategy="heads", device="cpu")
    plain = specli.load(target=str(target_dir), strategy="none", device="cpu")
    for p in (pair, plain):
        p.eos_ids = set()
    ids = pair.encode("def fibonacci(n):", chat=False)
    result = pair.generate(prompt_ids=ids, max_new_tokens=20)
    assert result.token_ids == plain.generate(prompt_ids=ids, max_new_tokens=20).token_ids
    assert result.stats.num_draft_tokens == 3 and result.stats.drafted > 0
    assert all(r.info["head"] == "heads" for r in result.rounds if r.drafted)
    assert pair.generate(prompt_ids=ids, max_new_tokens=20).token_ids == result.token_ids  # no state kept
    for name in ("heads", "blockwise"):
        out = CliRunner().invoke(
            app,
            ["generate", "def fibonacci(n):", "--target", str(target_dir), "--strategy", name, "--draft",
             str(heads_dir), "--no-chat", "--max-new-tokens", "12", "--json", "--threads", "1"],
        )  # fmt: skip
        assert out.exit_code == 0, out.output
        stats = json.loads(out.stdout)["stats"]
        assert stats["strategy"] == "heads" and stats["drafted"] > 0


def test_heads_for_another_hidden_size_are_refused_in_one_line_before_weights(tiny_pair, tmp_path):
    """Heads of hidden size 48 for a target of 64: one UsageError line naming both sizes, and the
    weights file (garbage here) is never opened."""
    folder = save_heads(BlockwiseHeads(HeadsConfig(2, 48)), tmp_path / "h", "another-model")
    (folder / "model.safetensors").write_bytes(b"not weights")
    with pytest.raises(UsageError) as err:
        specli.load(target=str(tiny_pair[0]), draft=str(folder), strategy="heads", device="cpu")
    assert "\n" not in str(err.value) and "48" in str(err.value) and "64" in str(err.value)


def test_each_kind_of_head_is_refused_by_the_other_strategy(tiny_pair, heads_dir, tmp_path):
    """Blockwise heads under --strategy eagle, and an EAGLE head (for the same target) under --strategy
    heads, stop with one line naming the strategy to use (not a crash inside the drafter)."""
    target = str(tiny_pair[0])
    with pytest.raises(UsageError, match="--strategy heads"):
        specli.load(target=target, draft=str(heads_dir), strategy="eagle", device="cpu")
    save_head(make_head(make_model("llama", 384, layers=4, seed=1), "eagle1"), tmp_path / "eagle1")
    with pytest.raises(UsageError, match="--strategy eagle"):
        specli.load(target=target, draft=str(tmp_path / "eagle1"), strategy="heads", device="cpu")


def test_the_table_line():
    """Trees allowed (Medusa's form), the alias, and the head weights loaded by --draft."""
    entry = STRATEGY_TABLE[Strategy.HEADS]
    assert entry.chains_only is None and entry.model is not None
    assert check_strategy("blockwise") == "heads"
    check_tree("blockwise", 8)


# --------------------------------------------------------------------------- trees (Medusa's form)


def run_tree(target, heads, k: int, n: int, size: int, width: int, cfg=SamplingConfig(), seed=None):
    """Rounds where every round grows a tree of `size` nodes (fixed: the whole tree is verified)."""
    config = EngineConfig(max_new_tokens=n, num_draft_tokens=k, fixed_k=True, sampling=cfg, seed=seed)
    drafter = HeadsDrafter(heads, target, tree_size=size, tree_width=width)
    return list(generate_rounds(CachedLM(target), drafter, PROMPT if seed is None else SAMPLED_PROMPT,
                                config, StopCriteria(set())))  # fmt: skip


@pytest.mark.parametrize("size,width", [(4, 2), (9, 3)])
def test_greedy_identity_with_medusa_trees(target, fitted, size, width):
    """Trees of the heads' top tokens (a node at depth d takes head d+1's): the output is generate()'s,
    for random heads (mostly refused nodes) and fitted ones (paths kept past the first child). Catches a
    node expanded with the wrong head, or the next state taken from the wrong row after a tree round."""
    for heads in (random_heads(target), fitted):
        rounds = run_tree(target, heads, 3, 30, size, width)
        assert [t for r in rounds for t in r.committed] == reference(target, PROMPT, 30)
        assert all(r.tree is not None and r.tree.size > 1 for r in rounds if r.drafted)
    kept = [r.accepted for r in run_tree(target, fitted, 3, 30, size, width)]
    assert max(kept) >= 2


def test_a_medusa_tree_draws_each_depth_from_its_head(target, fitted):
    """Greedy: the root's children are head 1's top W and every depth-2 node's children head 2's top W."""
    drafter = HeadsDrafter(fitted, target, tree_size=6, tree_width=2)
    drafter.reset(PROMPT)
    with torch.no_grad():
        out = target(torch.tensor([PROMPT[:-1]]), output_hidden_states=True)
    drafter.observe_features(out.hidden_states[-1][0])
    proposal = drafter.propose(2, SamplingConfig(), None, nodes=6)
    top = fitted.logits(out.hidden_states[-1][0, -1], target.get_output_embeddings()).topk(2).indices
    tokens, parents = proposal.ids.tolist(), proposal.parents
    assert [t for t, p in zip(tokens, parents, strict=True) if p == -1] == top[0].tolist()
    for node, parent in enumerate(parents):
        if parent >= 0:
            assert tokens[node] in top[1].tolist()


def test_sampled_medusa_trees_follow_the_target_distribution(small_target):
    """Under sampling the children are drawn from each head (the multi-candidate rule judges them): the
    first two tokens' joint is the target's exact one, through trees of width 2 with the heads' second
    depth (catches children drawn from one head and judged as another's)."""
    heads = random_heads(small_target, k=2, seed=3, std=SAMPLED_STD)
    counts = torch.zeros(V, V)
    for seed in range(RUNS):
        rounds = run_tree(small_target, heads, 2, 2, 4, 2, CFG, seed)
        assert rounds[0].tree is not None and rounds[0].tree.sampled
        tokens = [t for r in rounds for t in r.committed]
        counts[tokens[0], tokens[1]] += 1
    assert g_test_pvalue(counts, exact_joint(small_target, CFG, SAMPLED_PROMPT)) > 1e-3


def test_export_vllm_names_the_medusa_step_and_method(heads_dir, tiny_pair):
    """vLLM's method medusa reads its own folder: the export's first step writes it from the heads and
    the target's LM head, and --speculative-config points at it with one draft per head."""
    args = ["export", "vllm", "--strategy", "heads", "--draft", str(heads_dir), "--target", str(tiny_pair[0])]
    out = CliRunner().invoke(app, [*args, "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"method": "medusa", "model": "h-medusa", "num_speculative_tokens": 3}
    text = CliRunner().invoke(app, [*args, "--tree", "8"]).output
    step = f"python -m specli.models.medusa {heads_dir} --target {tiny_pair[0].resolve()} --out h-medusa"
    assert step in text and "top-1 token, a chain (not specli's --tree 8)" in text
    assert "speculative_token_tree" not in text and "EAGLE-1 layout" not in text  # no EAGLE note


@pytest.mark.parametrize("engine", ["sglang", "llama.cpp"])
def test_other_engines_refuse_heads_in_one_line(heads_dir, tiny_pair, engine):
    args = ["export", engine, "--strategy", "heads", "--draft", str(heads_dir), "--target", str(tiny_pair[0])]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2 and "only vllm reads Medusa heads" in out.output
    wrong = CliRunner().invoke(app, ["export", "vllm", "--strategy", "draft", "--draft", str(heads_dir)])
    assert wrong.exit_code == 2 and "--strategy heads" in wrong.output


@pytest.mark.parametrize("tied", [False, True])
def test_the_medusa_folder_is_vllms_layout_and_gives_the_heads_logits(tmp_path, tied):
    """The export's step, run as a user runs it, writes vLLM's Medusa names and config (medusa.py:
    blocks.{i}.layers.0 with bias, lm_heads.0 shared by original_lm_head), and vLLM's Medusa math over
    them (x + SiLU(W x + b) into lm_heads.0) gives specli's heads' logits; a tied target's LM head is its
    input embedding."""
    from safetensors.torch import load_file

    target = make_model("llama", 384, layers=2, seed=5, tie_word_embeddings=tied)
    target_dir = tmp_path / "target"
    target.save_pretrained(target_dir)
    heads = random_heads(target, k=3)
    heads_dir = save_heads(heads, tmp_path / "heads")
    out = subprocess.run(
        [sys.executable, "-m", "specli.models.medusa", str(heads_dir), "--target", str(target_dir), "--out",
         str(tmp_path / "medusa")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    config = json.loads((tmp_path / "medusa" / "config.json").read_text())
    assert {k: config[k] for k in ("model_type", "num_heads", "num_hidden_layers", "hidden_size")} == {
        "model_type": "medusa", "num_heads": 3, "num_hidden_layers": 1, "hidden_size": 64,
    }  # fmt: skip
    assert config["medusa_fc_bias"] and config["original_lm_head"]
    assert config["vocab_size"] == config["truncated_vocab_size"] == 384
    weights = load_file(str(tmp_path / "medusa" / "model.safetensors"))
    names = {f"blocks.{i}.layers.0.{p}" for i in range(3) for p in ("weight", "bias")} | {"lm_heads.0.weight"}
    assert set(weights) == names
    lm_head = target.get_output_embeddings().weight
    assert torch.equal(weights["lm_heads.0.weight"], lm_head.detach())
    if tied:
        assert torch.equal(weights["lm_heads.0.weight"], target.get_input_embeddings().weight.detach())
    hidden = torch.randn(5, 64)
    with torch.no_grad():
        expected = load_heads(heads_dir).logits(hidden, target.lm_head)  # [3, 5, V]
        blocks = [
            hidden + torch.nn.functional.silu(hidden @ weights[f"blocks.{i}.layers.0.weight"].T
                                              + weights[f"blocks.{i}.layers.0.bias"])
            for i in range(3)
        ]  # fmt: skip
        vllm = torch.stack([block @ weights["lm_heads.0.weight"].T for block in blocks])
    torch.testing.assert_close(vllm, expected)


def test_the_medusa_step_refuses_what_it_cannot_write_in_one_line(tmp_path, heads_dir):
    bad = subprocess.run(
        [sys.executable, "-m", "specli.models.medusa", str(tmp_path / "nothing"), "--target", str(tmp_path),
         "--out", str(tmp_path / "m")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode in (1, 2) and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("error: ") and len(bad.stderr.strip().splitlines()) <= 2
    other = make_model("llama", 384, layers=1, seed=3, hidden_size=32, intermediate_size=64)
    other.save_pretrained(tmp_path / "other")
    wrong = subprocess.run(
        [sys.executable, "-m", "specli.models.medusa", str(heads_dir), "--target", str(tmp_path / "other"),
         "--out", str(tmp_path / "m")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert wrong.returncode == 2 and "hidden size 64" in wrong.stderr and "Traceback" not in wrong.stderr
