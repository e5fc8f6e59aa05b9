"""Token trees (issue 32): the tree's shape functions, greedy tree verification by hand, and greedy
identity with transformers' generate() when drafters propose trees, over dynamic and static caches."""

from __future__ import annotations

import pytest
import torch
from conftest import make_model, save_model
from test_compile import static_twin, stream_checked
from test_engine import PROMPTS, reference

import specli
from specli.engine.sampling import SamplingConfig
from specli.engine.tree import (
    ancestor_mask,
    best_nodes,
    chain_parents,
    check_parents,
    children,
    depths,
    grow_tree,
    path_probabilities,
    path_to,
    subtree,
)
from specli.engine.verify import verify_tree, verify_tree_greedy
from specli.errors import UsageError
from specli.models.cached_lm import CachedLM

#        root
#       /    \
#      0      1
#     / \     |
#    2   3    4
#    |
#    5
PARENTS = [-1, -1, 0, 0, 1, 2]


def test_shape_functions():
    assert depths(PARENTS) == [1, 1, 2, 2, 2, 3]
    assert children(PARENTS) == [[0, 1], [2, 3], [4], [5], [], [], []]
    assert path_to(PARENTS, 5) == [0, 2, 5] and path_to(PARENTS, -1) == []
    assert chain_parents(3) == [-1, 0, 1]
    mask = ancestor_mask(PARENTS)  # rows: root, nodes 0..5
    assert mask[6].tolist() == [True, True, False, True, False, False, True]  # node 5: root, 0, 2, itself
    assert mask[5].tolist() == [True, False, True, False, False, True, False]  # node 4: root, 1, itself
    assert mask[0].tolist() == [True] + [False] * 6
    with pytest.raises(ValueError):
        check_parents([-1, 2, 0])


def test_best_nodes_are_closed_under_ancestors_and_subtree_renumbers():
    scores = path_probabilities(PARENTS, [0.6, 0.3, 0.5, 0.4, 0.9, 0.9])
    assert scores == pytest.approx([0.6, 0.3, 0.3, 0.24, 0.27, 0.27])
    assert best_nodes(PARENTS, scores, 1) == [0]
    assert best_nodes(PARENTS, scores, 3) == [0, 1, 2]  # ties go to the earlier node
    four = best_nodes(PARENTS, scores, 4)
    assert four == [0, 1, 2, 4]  # 5 (0.27) would need nothing more, but 4 ranks first on the tie
    assert subtree(PARENTS, four) == [-1, -1, 0, 1]
    # a high-scoring deep node never enters without its ancestors
    assert best_nodes([-1, 0], [0.1, 0.9], 1) == [0]


def test_grow_tree_expands_the_width_best_and_keeps_the_size_best():
    """Depth 1: the top-2 of `first`; depth 2: each of them gets its top-2; then the 4 best overall."""
    first = torch.tensor([0.05, 0.6, 0.3, 0.05])
    seen = []

    def expand(frontier, growth):
        seen.append([growth.tokens[n] for n in frontier])
        rows = {1: [0.7, 0.2, 0.05, 0.05], 2: [0.1, 0.1, 0.1, 0.7]}
        return torch.tensor([rows[growth.tokens[n]] for n in frontier])

    tokens, parents, probs = grow_tree(first, expand, depth=2, width=2, size=4)
    assert seen == [[1, 2]]
    # nodes grown: 1 (0.6), 2 (0.3), 1->0 (0.42), 1->1 (0.12), 2->3 (0.21), 2->0 (0.03)
    assert tokens == [1, 2, 0, 3] and parents == [-1, -1, 0, 1]
    assert probs == pytest.approx([0.6, 0.3, 0.7, 0.7])


def _logits(argmax_rows: list[int], vocab: int = 8) -> torch.Tensor:
    logits = torch.zeros(len(argmax_rows), vocab)
    for row, token in enumerate(argmax_rows):
        logits[row, token] = 5.0
    return logits


def test_greedy_tree_descends_into_the_matching_child():
    tokens = torch.tensor([3, 4, 5, 6, 7, 1])  # nodes 0..5 under PARENTS
    # root argmax 4 -> node 1; node 1's row argmax 7 -> node 4 (a leaf) -> bonus: node 4's argmax 2
    verdict = verify_tree_greedy(tokens, PARENTS, _logits([4, 0, 7, 0, 0, 2, 0]))
    assert verdict.tree.path == [1, 4] and verdict.accepted == 2
    assert verdict.token == 2 and verdict.is_bonus
    assert verdict.committed == [4, 7, 2]
    assert verdict.tree.status == ["rejected", "accepted", "unjudged", "unjudged", "accepted", "unjudged"]
    assert verdict.drafted[:2] == [4, 7] and sorted(verdict.drafted) == sorted(tokens.tolist())


def test_greedy_tree_corrects_where_no_child_matches():
    tokens = torch.tensor([3, 4, 5, 6, 7, 1])
    # root -> node 0 (3); node 0's argmax 2 matches neither child (5, 6): correction 2
    verdict = verify_tree_greedy(tokens, PARENTS, _logits([3, 2, 0, 0, 0, 0, 0]))
    assert verdict.tree.path == [0] and verdict.token == 2 and not verdict.is_bonus
    assert verdict.tree.status[:4] == ["accepted", "rejected", "rejected", "rejected"]
    # deepest: root -> 0 -> 2 -> 5, a leaf: bonus from node 5's row
    verdict = verify_tree_greedy(tokens, PARENTS, _logits([3, 5, 0, 1, 0, 0, 6]))
    assert verdict.tree.path == [0, 2, 5] and verdict.token == 6 and verdict.is_bonus
    # the root's argmax is no child: correction, nothing kept
    verdict = verify_tree_greedy(tokens, PARENTS, _logits([0, 0, 0, 0, 0, 0, 0]))
    assert verdict.tree.path == [] and verdict.accepted == 0 and verdict.committed == [0]


def test_verify_tree_records_the_targets_probabilities_when_asked():
    tokens = torch.tensor([3, 4, 5, 6, 7, 1])
    logits = _logits([4, 0, 7, 0, 0, 2, 0])
    verdict = verify_tree(tokens, PARENTS, logits, SamplingConfig(), None, record_top=2)
    probs = logits.softmax(-1)
    assert verdict.tree.target_probs[1] == pytest.approx(float(probs[0, 4]))  # node 1 at the root's row
    assert verdict.tree.target_probs[4] == pytest.approx(float(probs[2, 7]))  # node 4 at node 1's row
    assert verdict.token_source[0][0] == 2  # the bonus's distribution: node 4's row


# --------------------------------------------------------------------------- the masked forward


@pytest.mark.parametrize(
    ("arch", "attention"),
    [("llama", "sdpa"), ("llama", "eager"), ("gpt2", "sdpa"), ("opt", "eager"), ("gemma", "sdpa")],
)
@pytest.mark.parametrize("static", [False, True])
def test_masked_forward_equals_each_paths_own_forward_and_keep_compacts(arch, attention, static):
    """Each tree row's logits are the model's after prefix + that node's path (SDPA takes the boolean
    mask, eager attention the additive one); after `keep`, the next forward continues the kept path
    exactly (the other nodes' keys are gone)."""
    model = make_model(arch, 64, layers=2, seed=3, eos_token_id=None, attn_implementation=attention)
    assert model.config._attn_implementation == attention
    lm = CachedLM(model, static_length=64 if static else None)
    prefix = torch.tensor([5, 9, 17, 33, 2, 40, 8])
    tokens = torch.tensor([11, 12, 13, 14, 15, 16])
    cache = lm.new_cache()
    lm.forward(prefix[:-1], cache, last_only=True)
    length = lm.cache_length(cache)
    positions = torch.tensor([length] + [length + d for d in depths(PARENTS)])
    visible = torch.cat([torch.ones(7, length, dtype=torch.bool), ancestor_mask(PARENTS)], 1)
    logits, _ = lm.forward_masked(torch.cat([prefix[-1:], tokens]), cache, positions, visible)
    with torch.no_grad():
        for node in range(-1, len(PARENTS)):
            path = path_to(PARENTS, node) if node >= 0 else []
            sequence = torch.cat([prefix, tokens[path]])
            expected = model(sequence[None]).logits[0, -1]
            torch.testing.assert_close(logits[node + 1], expected, atol=1e-4, rtol=1e-4)
        lm.keep(cache, 7, [0, 1, 3])  # root, node 0, node 2
        assert lm.cache_length(cache) == length + 3
        after = lm.forward(torch.tensor([20]), cache)[-1]
        expected = model(torch.cat([prefix, tokens[[0, 2]], torch.tensor([20])])[None]).logits[0, -1]
        torch.testing.assert_close(after, expected, atol=1e-4, rtol=1e-4)


# --------------------------------------------------------------------------- greedy identity


@pytest.fixture(scope="module", params=["llama", "qwen2", "gpt2", "mistral", "gemma", "opt"])
def tree_pair(request, tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp(f"tree-{request.param}")
    vocab = len(tokenizer)
    target = save_model(
        root / "t", make_model(request.param, vocab, layers=3, seed=11, eos_token_id=None), tokenizer
    )
    draft = save_model(
        root / "d", make_model(request.param, vocab, layers=1, seed=12, eos_token_id=None), tokenizer
    )
    pair = specli.load(target=str(target), draft=str(draft), device="cpu", threads=None)
    pair.eos_ids = set()
    return pair


@pytest.mark.parametrize(("tree", "width", "fixed"), [(4, 2, True), (16, 3, True), (32, 2, False)])
def test_tree_drafts_decode_exactly_as_generate(tree_pair, tree, width, fixed):
    pair = tree_pair
    nodes = trees = 0
    for prompt in PROMPTS:
        ids = pair.encode(prompt, chat=False)
        expected = reference(pair, ids, 21, set())
        result = pair.generate(
            prompt_ids=ids, max_new_tokens=21, num_draft_tokens=4, tree=tree, tree_width=width, fixed_k=fixed
        )
        assert result.token_ids == expected, (prompt, tree, width)
        nodes += result.stats.drafted
        if fixed:  # every drafting round a tree; else the cost model also runs chain rounds
            assert all(r.tree is not None for r in result.rounds if r.drafted)
        trees += sum(r.tree is not None for r in result.rounds)
    assert nodes > 0 and trees > 0


def test_tree_rounds_keep_one_path_and_count_nodes(tree_pair):
    ids = tree_pair.encode(PROMPTS[0], chat=False)
    result = tree_pair.generate(prompt_ids=ids, max_new_tokens=12, tree=8, tree_width=2, fixed_k=True)
    for r in result.rounds:
        if not r.drafted:
            continue
        t = r.tree
        assert r.nodes == t.size == len(r.drafted) <= 8
        assert [t.tokens[i] for i in t.path] == r.drafted[: r.accepted] == r.committed[: r.accepted]
        assert all(t.status[i] == "accepted" for i in t.path)
        assert r.kind.value == ("bonus" if t.ends_at_leaf else "correction")
    assert result.stats.nodes_per_round > 2  # trees, not chains


def test_a_target_drafting_for_itself_keeps_the_deepest_path(tmp_path, tokenizer):
    """The target as its own drafter: at every row its top child is the argmax, and a node's top child
    is kept whenever any of its children is (it ranks first among them), so every round follows top
    children down to a leaf and ends in a bonus, whatever the width."""
    target = save_model(
        tmp_path / "t", make_model("llama", len(tokenizer), layers=2, eos_token_id=None), tokenizer
    )
    pair = specli.load(target=str(target), draft=str(target), device="cpu", threads=None)
    pair.eos_ids = set()
    ids = pair.encode(PROMPTS[1], chat=False)
    result = pair.generate(
        prompt_ids=ids, max_new_tokens=20, num_draft_tokens=4, tree=12, tree_width=3, fixed_k=True
    )
    assert result.token_ids == reference(pair, ids, 20, set())
    trees = [r for r in result.rounds if r.tree is not None]
    assert trees and all(r.kind.value == "bonus" and r.accepted >= 1 for r in trees)
    for r in trees:  # the path is the chain of first children
        chain, node = [], -1
        while node in r.tree.parents:
            node = r.tree.parents.index(node)
            chain.append(node)
        assert r.tree.path == chain


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_tree_over_static_caches_decodes_exactly_and_keeps_caches_in_step(tmp_path, tokenizer, arch):
    vocab = len(tokenizer)
    target = save_model(
        tmp_path / "t", make_model(arch, vocab, layers=3, seed=11, eos_token_id=None), tokenizer
    )
    draft = save_model(
        tmp_path / "d", make_model(arch, vocab, layers=1, seed=12, eos_token_id=None), tokenizer
    )
    dynamic = specli.load(target=str(target), draft=str(draft), device="cpu", threads=None)
    dynamic.eos_ids = set()
    static = static_twin(dynamic)
    for prompt in PROMPTS:
        ids = static.encode(prompt, chat=False)
        tokens, rounds = stream_checked(
            static, ids, max_new_tokens=21, num_draft_tokens=3, tree=8, tree_width=2, fixed_k=True
        )
        assert tokens == reference(dynamic, ids, 21, set()), prompt
        assert any(r.tree is not None and r.nodes > r.accepted for r in rounds)


def test_self_strategy_refuses_trees_in_one_line(tree_pair):
    with pytest.raises(UsageError) as info:
        tree_pair.generate("def f():", strategy="self", tree=8, max_new_tokens=4)
    assert "\n" not in info.value.message and "chain" in info.value.message


# --------------------------------------------------------------------------- the drafters' trees


def _first_proposal(drafter, prompt: list[int], k: int, sampling: SamplingConfig = SamplingConfig()):
    drafter.reset(prompt)
    return drafter.propose(k, sampling, None, nodes=drafter.tree_size)


def test_the_draft_models_tree_nodes_are_its_top_children_given_each_path(tokenizer):
    """Each expanded node's children are the draft model's top tokens after prompt + that node's path (its
    own forward, no cache): the masked drafter forward gives every node its ancestors and no sibling."""
    from specli.drafters.draft_model import DraftModelDrafter

    model = make_model("llama", 64, layers=2, seed=5, eos_token_id=None)
    prompt = [5, 9, 17, 33, 2, 40, 8]
    for lean in (False, True):
        lm = CachedLM(model)
        if lean:
            from specli.models.own_forward.decoder import LeanDecoder

            lm = LeanDecoder.build(model)[0]
            assert lm is not None
        drafter = DraftModelDrafter(lm, 64, tree_size=40, tree_width=3)
        proposal = _first_proposal(drafter, prompt, 4)
        tokens, parents = proposal.ids.tolist(), proposal.parents
        assert max(depths(parents)) == 4 and len(tokens) == 3 + 9 + 9 + 9  # nothing pruned at 40
        with torch.no_grad():
            for node in range(-1, len(tokens)):
                kids = [i for i, parent in enumerate(parents) if parent == node]
                if not kids:
                    continue
                path = [tokens[i] for i in path_to(parents, node)] if node >= 0 else []
                logits = model(torch.tensor([prompt + path])).logits[0, -1]
                top = logits.softmax(-1).topk(3)
                assert [tokens[i] for i in kids] == top.indices.tolist(), (lean, node)
                assert [proposal.probs[i] for i in kids] == pytest.approx(top.values.tolist(), abs=1e-4)
        assert drafter.lm.cache_length(drafter._cache) == len(prompt)  # the tree's positions are gone


@pytest.mark.parametrize("which", ["eagle1", "eagle3-reduced"])
def test_eagle_trees_of_width_one_are_its_chains_and_lean_equals_the_heads_own_step(which):
    """A width-1 tree of depth k drafts exactly the chain's k tokens (positions and masks as the chain's);
    a width-3 tree is the same through the lean step and the head's own step; greedy output stays the
    target's with trees."""
    from test_eagle import fit_to_target, make_head
    from test_eagle import reference as eagle_reference

    from specli.drafters.eagle import EagleDrafter
    from specli.engine.loop import EngineConfig, generate_rounds
    from specli.engine.stopping import StopCriteria
    from specli.models.own_forward.head import LeanHead

    target = make_model("llama", 384, layers=5, seed=4, eos_token_id=None).eval()
    prompt = [3, 44, 17, 250, 9, 81, 12]
    head = fit_to_target(make_head(target, which), target, prompt)

    def first_round(drafter):
        config = EngineConfig(max_new_tokens=8, num_draft_tokens=4, fixed_k=True)
        return next(iter(generate_rounds(CachedLM(target), drafter, prompt, config, StopCriteria(set()))))

    chain = first_round(EagleDrafter(head, target))
    tree = first_round(EagleDrafter(head, target, tree_size=4, tree_width=1))
    assert tree.tree is not None and tree.tree.tokens == chain.drafted
    own = first_round(EagleDrafter(head, target, tree_size=12, tree_width=3))
    lean = first_round(EagleDrafter(head, target, lean=LeanHead(head), tree_size=12, tree_width=3))
    assert own.tree.tokens == lean.tree.tokens and own.tree.parents == lean.tree.parents
    assert own.tree.draft_probs == pytest.approx(lean.tree.draft_probs, abs=1e-4)
    expected = eagle_reference(target, prompt, 24)
    for drafter in (EagleDrafter(head, target, lean=LeanHead(head), tree_size=12, tree_width=3),
                    EagleDrafter(head, target, tree_size=6, tree_width=2)):  # fmt: skip
        config = EngineConfig(max_new_tokens=24, num_draft_tokens=4)
        rounds = list(generate_rounds(CachedLM(target), drafter, prompt, config, StopCriteria(set())))
        assert [t for r in rounds for t in r.committed] == expected
        assert sum(r.accepted for r in rounds) > 0


def test_lookup_trees_branch_where_the_text_did():
    """The suffix index's followers become branches: after "a b" the text continued with c (twice) and d
    (once), so the root's children are c (2/3) then d (1/3), and each branch continues its own passage."""
    from specli.drafters.prompt_lookup import PromptLookupDrafter

    a, b, c, d, e, f = 10, 11, 12, 13, 14, 15
    text = [a, b, c, e, 1, a, b, d, f, 2, a, b, c, e, 3, a, b]
    drafter = PromptLookupDrafter(ngram_min=1, ngram_max=2, tree_size=8, tree_width=2)
    proposal = _first_proposal(drafter, text, 2)
    tokens, parents = proposal.ids.tolist(), proposal.parents
    root_kids = [i for i, parent in enumerate(parents) if parent == -1]
    assert [tokens[i] for i in root_kids] == [c, d]
    assert [proposal.probs[i] for i in root_kids] == pytest.approx([2 / 3, 1 / 3])
    under_c = [tokens[i] for i, parent in enumerate(parents) if parent == root_kids[0]]
    under_d = [tokens[i] for i, parent in enumerate(parents) if parent == root_kids[1]]
    assert under_c == [e] and under_d == [f]
    drafter.commit_tree([root_kids[1]], f)  # the target took d, then f: both enter the index
    assert drafter._index.tokens[-2:] == [d, f]


def test_lookup_draws_its_childrens_tokens_from_its_statistics_under_sampling():
    """With the target's vocabulary (as `build` gives it) and sampling, the root's children are drawn
    from the followers' shares (c 2/3, d 1/3): q's row 0 is those shares, row i + 1 node i's, and c
    is drawn first about 2/3 of the time; greedy still takes the top followers."""
    from specli.drafters.prompt_lookup import PromptLookupDrafter

    a, b, c, d, e, f = 10, 11, 12, 13, 14, 15
    text = [a, b, c, e, 1, a, b, d, f, 2, a, b, c, e, 3, a, b]
    firsts = []
    for seed in range(300):
        drafter = PromptLookupDrafter(ngram_min=1, ngram_max=2, tree_size=8, tree_width=2, vocab_size=20)
        drafter.reset(text)
        gen = torch.Generator().manual_seed(seed)
        proposal = drafter.propose(2, SamplingConfig(temperature=1.0), gen, nodes=8)
        tokens, parents, q = proposal.ids.tolist(), proposal.parents, proposal.q
        assert q is not None and q.shape == (len(tokens) + 1, 20)
        assert q[0, [c, d]].tolist() == pytest.approx([2 / 3, 1 / 3]) and q[0].sum() == pytest.approx(1.0)
        root_kids = [i for i, parent in enumerate(parents) if parent == -1]
        assert sorted(tokens[i] for i in root_kids) == [c, d]
        for node in root_kids:  # each branch continues its own passage: e after c, f after d
            assert q[node + 1, e if tokens[node] == c else f] == pytest.approx(1.0)
        firsts.append(tokens[root_kids[0]])
    assert 0.58 < firsts.count(c) / len(firsts) < 0.75
    greedy = PromptLookupDrafter(ngram_min=1, ngram_max=2, tree_size=8, tree_width=2, vocab_size=20)
    assert _first_proposal(greedy, text, 2).q is None


def test_lookup_trees_decode_exactly_as_generate(tree_pair):
    pair = tree_pair
    prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a"
    ids = pair.encode(prompt, chat=False)
    expected = reference(pair, ids, 24, set())
    for fixed in (True, False):
        result = pair.generate(
            prompt_ids=ids, max_new_tokens=24, strategy="lookup", tree=8, tree_width=3, fixed_k=fixed
        )
        assert result.token_ids == expected


# --------------------------------------------------------------------------- the tree's size per round


def _record(parents, probs, path):
    from specli.engine.tree import TreeRecord

    status = ["accepted" if i in path else "rejected" for i in range(len(parents))]
    return TreeRecord(list(range(len(parents))), parents, probs, [], status, path)


# a width-2 tree of depth 3: nodes 0/1 under the root, 2/3 under 0, 4/5 under 1, 6/7 under 2, 8/9 under 4
WIDE = [-1, -1, 0, 0, 1, 1, 2, 2, 4, 4]
WIDE_PROBS = [0.6, 0.1, 0.6, 0.1, 0.6, 0.1, 0.6, 0.1, 0.6, 0.1]  # path (0, 2, 6): 0.6, 0.36, 0.216


def _controller(verify_per_token: float, paths: list[list[int]], rounds: int = 12):
    """A DraftLength that saw `rounds` WIDE trees (taking the given paths in turn) verified at 10 ms plus
    verify_per_token per token, drafted in 3 ms."""
    from specli.engine.draft_length import DraftLength

    length = DraftLength(3)
    for i in range(rounds):
        path = paths[i % len(paths)]
        nodes = 1 + len(WIDE) if i % 2 else 4  # two verify lengths, so the line's slope is measured
        length.observe(3, len(path), 0.003, 0.010 + verify_per_token * nodes, verified=nodes)
        length.observe_tree(_record(WIDE, WIDE_PROBS, path))
    return length


def test_a_free_verify_and_deep_acceptance_keep_the_whole_tree():
    """Flat verify cost, and the likeliest path (0, 2, 6) or its siblings accepted: every node pays."""
    length = _controller(0.0, [[0, 2, 6], [1, 4, 8], [0, 3]])
    assert length.choose_nodes(WIDE, WIDE_PROBS, 0.003) == list(range(len(WIDE)))


def test_a_costly_verify_keeps_only_the_likeliest_chain():
    """Each verified token costs as much as the round's fixed part and only the first choice is ever
    kept: the best chain (0, 2, 6) is worth its nodes, the siblings are not."""
    length = _controller(0.010, [[0, 2, 6]])
    assert length.choose_nodes(WIDE, WIDE_PROBS, 0.003) == [0, 2, 6]


def test_the_node_acceptance_is_learned_from_what_was_accepted():
    """Path probabilities are only priors: the likeliest path's nodes (0.6, 0.36, 0.216) were always kept,
    so their bins learn acceptance near 1, and node 1's (0.1) near 0."""
    length = _controller(0.0, [[0, 2, 6]], rounds=40)
    assert min(length.node_acceptance(p) for p in (0.6, 0.36, 0.216)) > 0.9
    assert length.node_acceptance(0.1) < 0.1
    fixed = type(length)(3, fixed=True)
    assert fixed.choose_nodes(WIDE, WIDE_PROBS, 0.003) == list(range(len(WIDE)))


def test_trees_run_only_while_they_deliver_more_tokens_per_second_than_chains():
    """Warm-up: trees, then chains; then the faster kind, the other once every EXPLORE_EVERY rounds."""
    from specli.engine.draft_length import EXPLORE_EVERY, WARMUP_ROUNDS, DraftLength

    def run(tree_rate: float, chain_rate: float, rounds: int) -> list[bool]:
        length, kinds = DraftLength(4), []
        for _ in range(rounds):
            tree = length.use_tree()
            kinds.append(tree)
            length.observe_round(tree, 3, 3 / (tree_rate if tree else chain_rate))
        return kinds

    slow_trees = run(tree_rate=100.0, chain_rate=150.0, rounds=60)
    assert slow_trees[:WARMUP_ROUNDS] == [True] * WARMUP_ROUNDS
    assert slow_trees[WARMUP_ROUNDS : 2 * WARMUP_ROUNDS] == [False] * WARMUP_ROUNDS
    later = slow_trees[2 * WARMUP_ROUNDS :]
    assert 1 <= sum(later) <= len(later) // EXPLORE_EVERY + 1  # chains, with a tree now and then
    fast_trees = run(tree_rate=150.0, chain_rate=100.0, rounds=60)[2 * WARMUP_ROUNDS :]
    assert 1 <= fast_trees.count(False) <= len(fast_trees) // EXPLORE_EVERY + 1
    assert DraftLength(4, fixed=True).use_tree()


def test_a_pair_remembers_tree_against_chain_rounds_across_generations(tree_pair):
    """The warm-up of each kind is paid once per pair and settings, not once per prompt: the counts of
    tree and chain rounds carry over from one generation to the next (and not to other settings)."""
    ids = tree_pair.encode(PROMPTS[0], chat=False)
    tree_pair.generate(prompt_ids=ids, max_new_tokens=24, tree=8, tree_width=3)
    (choice,) = [c.trees for key, c in tree_pair._draft_lengths.items() if key[:3] == ("draft", 8, 3)]
    first = sum(entry[2] for entry in choice.modes.values())
    assert first > 0
    result = tree_pair.generate(prompt_ids=ids, max_new_tokens=24, tree=8, tree_width=3)
    assert sum(entry[2] for entry in choice.modes.values()) == first + sum(
        1 for r in result.rounds if r.drafted
    )
    tree_pair.generate(prompt_ids=ids, max_new_tokens=8, tree=4, tree_width=3)
    kinds = (("draft", 8, 3), ("draft", 4, 3))
    assert len([key for key in tree_pair._draft_lengths if key[:3] in kinds]) == 2
