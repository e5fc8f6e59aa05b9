"""Blockwise heads with a draft vocabulary (`HeadsConfig.draft_vocab`, the folder's `vocab`): each head
projects through N rows of the target's LM head, tokens outside get q = 0. The folder round-trips, drafts
stay inside the vocabulary, greedy output and the sampled distribution stay the target's (G-test, with a
control that reports the unrestricted distribution as q), ids outside the target are refused in one line,
and `specli train heads --draft-vocab N` writes the data's N most frequent tokens."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest
import torch
from conftest import make_model
from test_heads import CFG, PROMPT, SAMPLED_PROMPT, V, fitted_heads, reference, sampled_joint
from test_lossless_sampling import exact_joint, g_test_pvalue
from test_sequential_heads import committed, sequential_heads

import specli
from specli.drafters.heads import HeadsDrafter
from specli.engine.drafter import Drafts
from specli.engine.loop import EngineConfig, generate_rounds
from specli.engine.sampling import SamplingConfig, process_logits
from specli.engine.stopping import StopCriteria
from specli.errors import ModelLoadError
from specli.models.blockwise_heads import BlockwiseHeads, load_heads, read_config, save_heads
from specli.models.cached_lm import CachedLM
from specli.training.recipe import build_recipe, resume_conflicts, resumed


def _vocabulary(target, prompt: list[int], n: int, size: int) -> torch.Tensor:
    """`size` ids holding the target's greedy continuation of prompt (so drafts can be right) and, to
    make up the rest, ids from the top of the id range (so most of the vocabulary is left out)."""
    wanted = list(dict.fromkeys(reference(target, prompt, n) + prompt))[:size]
    rest = [i for i in range(target.config.vocab_size - 1, -1, -1) if i not in wanted]
    return torch.tensor(wanted + rest[: size - len(wanted)])


@pytest.fixture(scope="module")
def target():
    return make_model("llama", 384, layers=4, seed=4, eos_token_id=None).eval()


def test_a_vocabulary_round_trips_and_drafts_stay_inside_it(target, tmp_path):
    """The folder says draft_vocab N and holds vocab [N] as int64 beside bfloat16 blocks; every drafted
    token is one of its ids, drafts are kept (the vocabulary holds the continuation) and greedy output
    is generate()'s; a sampled draft's q is 0 off the vocabulary."""
    heads = fitted_heads(target, PROMPT, sequential=True, k=3)  # fitted: some drafts are kept
    vocab = _vocabulary(target, PROMPT, 30, 48)
    folder = save_heads(heads, tmp_path / "h", "t", vocab=vocab)
    assert json.loads((folder / "config.json").read_text())["specli_heads"]["draft_vocab"] == 48
    loaded = load_heads(folder, dtype=torch.float32)
    assert loaded.config.draft_vocab == 48 and loaded.vocab.dtype == torch.long
    assert torch.equal(loaded.vocab, vocab)
    drafter = HeadsDrafter(loaded, target)
    config = EngineConfig(max_new_tokens=30, num_draft_tokens=3, fixed_k=True)
    rounds = list(generate_rounds(CachedLM(target), drafter, PROMPT, config, StopCriteria(set())))
    drafted = [t for r in rounds for t in r.drafted]
    assert drafted and set(drafted) <= set(vocab.tolist())
    assert sum(r.accepted for r in rounds) > 0
    assert committed(rounds) == reference(target, PROMPT, 30)
    drafter.reset(PROMPT)  # sampled: every draft's q is 0 off the vocabulary and sums to 1 on it
    drafter.observe_features(torch.randn(len(PROMPT) - 1, target.config.hidden_size))
    q = drafter.propose(3, SamplingConfig(1.0), torch.Generator().manual_seed(0)).q  # [k, V]; no top-k
    outside = torch.ones(target.config.vocab_size, dtype=torch.bool)
    outside[vocab] = False
    assert q is not None and torch.all(q[:, outside] == 0)
    torch.testing.assert_close(q[:, vocab].sum(-1), torch.ones(len(q)))


def test_ids_outside_the_target_are_refused_in_one_line(target, tmp_path):
    folder = save_heads(sequential_heads(target, k=2), tmp_path / "h", vocab=torch.tensor([1, 2, 384]))
    with pytest.raises(ModelLoadError, match="token ids up to 384, and the target has 384") as info:
        HeadsDrafter(load_heads(folder), target)
    assert "\n" not in info.value.message


# --------------------------------------------------------------------------- sampling


class UnrestrictedQ(HeadsDrafter):
    """The bug a draft vocabulary invites: draft from the narrowed distribution but report the head's
    distribution over every token as q."""

    def _propose_sequential(self, k, sampling, generator, info):
        drafts = Drafts(sampling, generator, self.p_min)
        state, token = self._hidden[None], torch.tensor([self._pending])
        for i in range(k):
            state, narrowed = self._head_logits(i, state, self._token_inputs(token))
            token = drafts.take(narrowed[0])
            if token is None:
                break
            full = self._lm_head(state)  # [1, V]: every token
            drafts.qs[-1] = process_logits(full, sampling)[0]
        return drafts.proposal(info)


@pytest.fixture(scope="module")
def small_target():
    return make_model("llama", V, layers=3, hidden=32, seed=21, init_range=0.6, eos_token_id=None).eval()


def _counts(target, drafter_class) -> tuple[torch.Tensor, float]:
    base = sequential_heads(target, k=2, seed=3, std=0.05)
    heads = BlockwiseHeads(replace(base.config, draft_vocab=V // 2)).eval()
    heads.load_state_dict({**base.state_dict(), "vocab": torch.arange(0, V, 2)})  # half the support out
    return sampled_joint(target, drafter_class, heads=heads)


def test_sampled_drafts_from_a_vocabulary_keep_the_target_distribution(small_target):
    counts, acceptance = _counts(small_target, HeadsDrafter)
    assert 0.05 < acceptance < 0.95
    assert g_test_pvalue(counts, exact_joint(small_target, CFG, SAMPLED_PROMPT)) > 1e-3


def test_control_the_unrestricted_q_fails_the_same_test(small_target):
    counts, _ = _counts(small_target, UnrestrictedQ)
    assert g_test_pvalue(counts, exact_joint(small_target, CFG, SAMPLED_PROMPT)) < 1e-6


# --------------------------------------------------------------------------- training


def test_train_heads_writes_the_datas_most_frequent_tokens(tiny_pair, tokenizer, tmp_path):
    """--draft-vocab N: the saved folder holds the N tokens the training data uses most (ascending),
    and the pair drafts from them; a resumed heads run may change N (it is chosen at
    save time), an EAGLE-3 run may not (its head is built over it)."""
    from test_train import CORPUS, train

    text = tmp_path / "text.jsonl"
    text.write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS * 6))
    out = tmp_path / "heads"
    train("heads", "--target", str(tiny_pair[0]), "--data", str(text), "--out", str(out), "--quick",
          "--parallel", "2", "--context", "16", "--steps", "4", "--eval-count", "0", "--sequential",
          "--draft-vocab", "24")  # fmt: skip
    assert read_config(out).draft_vocab == 24
    vocab = load_heads(out).vocab.tolist()
    counts = Counter(t for line in CORPUS for t in tokenizer(line)["input_ids"])
    assert vocab == sorted(vocab) and {t for t, _ in counts.most_common(8)} <= set(vocab)
    pair = specli.load(target=str(tiny_pair[0]), draft=str(out), strategy="heads", device="cpu", threads=None)
    rounds = pair.generate(prompt_ids=[5, 9, 12, 7], max_new_tokens=12, fixed_k=True).rounds
    assert {t for r in rounds for t in r.drafted} <= set(vocab)
    heads_recipe, eagle_recipe = (build_recipe(kind, "t", "d") for kind in ("heads", "eagle3"))
    assert heads_recipe.draft_vocab == 8192
    assert resume_conflicts(heads_recipe, {"draft_vocab": 100}) == []
    assert resumed(heads_recipe, {"draft_vocab": 100}).draft_vocab == 100
    assert resume_conflicts(eagle_recipe, {"draft_vocab": 100}) != []
