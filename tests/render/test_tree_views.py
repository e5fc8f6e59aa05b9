"""Token-tree rounds in the views: `specli explain` draws the tree (root, each node's token, q, p and
✓/✗/·, the correction or bonus under the kept path's last node, in the kinds' styles), the live status
line names the round's nodes, the live text never strikes a tree's refused nodes through, and chain
rounds look as they always did. Rounds are built by hand, as the engine records them (Round.tree)."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.color import ColorSystem
from rich.console import Console
from rich.style import Style

from specli.engine.events import Round, TokenKind
from specli.engine.tree import TreeRecord
from specli.render.explain import TREE_ROOT, ExplainView, prob, token_label
from specli.render.live import TokenView
from specli.render.plain import PlainWriter, draft_words
from specli.render.styles import KIND_STYLES, visible

PROMPT_TEXT = "def fibonacci(n):"

# The tree of the tests, in node order (parents before children):
#
#   root ─┬─ 0 A ✓ ─┬─ 2 C ✓ ─┬─ 5 F ✗
#         │         │         ├─ 6 G ✗
#         │         │         └─ → H (correction)
#         │         └─ 3 D ✗
#         └─ 1 B ✗ ─── 4 E ·
PARENTS = [-1, -1, 0, 0, 1, 2, 2]
STATUS = ["accepted", "rejected", "accepted", "rejected", "unjudged", "rejected", "rejected"]
PATH = [0, 2]
Q = [0.61, 0.32, 0.55, 0.21, 0.4, 0.33, 0.12]
P = [0.58, 0.25, 0.71, 0.11, 0.09, 0.2, 0.15]


def distinct_tokens(tokenizer, n: int) -> list[int]:
    """n token ids whose quoted labels differ and are plain printable words (no replacement char)."""
    ids, labels = [], set()
    for token in range(260, len(tokenizer)):
        label = token_label(tokenizer, token)
        if label not in labels and "\ufffd" not in label and label.strip("'\" ").isalpha():
            ids.append(token)
            labels.add(label)
        if len(ids) == n:
            return ids
    raise AssertionError("too few distinct tokens")


def tree_round(
    tokens, parents, status, path, token, kind, *, greedy=True, q=None, p=None, index=0, **fields
) -> Round:
    """A tree round as the engine records it: drafted = the accepted path, then the other nodes in node
    order (draft/target/accept probabilities and uniforms in that order), committed = path + token."""
    n = len(tokens)
    q = q if q is not None else [0.5] * n
    p = p if p is not None else [0.5] * n
    order = path + [i for i in range(n) if i not in path]
    accept = [0.9 if status[i] == "accepted" else 0.2 if status[i] == "rejected" else 0.0 for i in range(n)]
    uniforms = [0.1 if status[i] == "accepted" else 0.8 for i in range(n)]
    values = dict(
        index=index, drafted=[tokens[i] for i in order], draft_probs=[q[i] for i in order],
        target_probs=[p[i] for i in order], target_argmax=[], accept_probs=[accept[i] for i in order],
        uniforms=[] if greedy else [uniforms[i] for i in order], accepted=len(path), token=token, kind=kind,
        committed=[tokens[i] for i in path] + [token], draft_time=0, verify_time=0, elapsed=0.1,
        draft_limit=3, draft_reason="cost model", token_source=[(token, 0.6)],
        tree=TreeRecord(list(tokens), list(parents), q, p, status, path),
    )  # fmt: skip
    return Round(**{**values, **fields})


@pytest.fixture
def ids(tokenizer) -> list[int]:
    return distinct_tokens(tokenizer, 9)


def correction_round(ids, greedy=True, index=0) -> Round:
    return tree_round(
        ids[:7], PARENTS, STATUS, PATH, ids[7], TokenKind.CORRECTION, greedy=greedy, q=Q, p=P, index=index
    )


def text_of(renderable, width=120) -> str:
    console = Console(record=True, file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.export_text()


def ansi_of(renderable, width=120) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system="truecolor")
    console.print(renderable)
    return console.file.getvalue()


def sgr(style: Style | str) -> str:
    """The escape sequence Rich opens `style` with in a truecolor terminal."""
    style = Style.parse(style) if isinstance(style, str) else style
    return style.render("x", color_system=ColorSystem.TRUECOLOR).split("x")[0]


def line_with(text: str, needle: str) -> tuple[int, str]:
    """(index, line) of the one line holding `needle`."""
    found = [(i, line) for i, line in enumerate(text.splitlines()) if needle in line]
    assert len(found) == 1, (needle, text)
    return found[0]


# --------------------------------------------------------------------------- explain


def test_explain_draws_the_tree_with_each_nodes_numbers_and_mark(tokenizer, ids):
    """Each node on its own line under its parent: ✓/✗ with q and p for judged nodes, · and q alone for
    one under a refused node; the correction is the last child of the kept path's last node; the title
    and a line say the node count and the accepted path's length; no chain table. Caught: nodes drawn
    flat or under the wrong parent, p shown for a node the target never judged, the correction hung
    under the root."""
    label = [token_label(tokenizer, t) for t in ids]
    view = ExplainView(tokenizer, "draft", 3, greedy=True)
    text = text_of(view.panel(correction_round(ids)))
    assert "nodes 7 · depth 3 · accepted 2" in text.splitlines()[0]  # the panel's title
    assert "7 nodes under the pending token" in text and "the accepted path is 2 nodes long" in text
    assert "draft token" not in text and "target argmax" not in text  # not the chain's table
    root, _ = line_with(text, TREE_ROOT)
    rows = {}
    for node, mark in enumerate(["✓", "✗", "✓", "✗", "·", "✗", "✗"]):
        shown = f"{mark} {label[node]}  q {prob(Q[node])}"
        if STATUS[node] != "unjudged":
            shown += f"  p {prob(P[node])}"
        rows[node] = line_with(text, shown)
    assert "  p " not in rows[4][1]  # never judged: the target's p is not shown
    correction = line_with(text, f"→ {label[7]}  correction")

    def column(row: tuple[int, str], mark: str) -> int:
        return row[1].index(mark)

    # depth = indentation: siblings share a column, a child sits one step right of its parent
    assert column(rows[0], "✓") == column(rows[1], "✗")
    assert column(rows[2], "✓") == column(rows[3], "✗") == column(rows[4], "·") > column(rows[0], "✓")
    assert column(rows[5], "✗") == column(rows[6], "✗") == column(correction, "→") > column(rows[2], "✓")
    # order: each node below its parent, children in node order, the correction last under C
    assert root < rows[0][0] < rows[2][0] < rows[5][0] < rows[6][0] < correction[0] < rows[3][0]
    assert rows[3][0] < rows[1][0] < rows[4][0]
    assert f"No child of the last accepted node {label[2]} (2 children tried) is the target's argmax" in text
    assert f"Correction (the argmax): {label[7]}" in text


def test_explain_tree_styles_follow_the_token_kinds(tokenizer, ids):
    """Accepted nodes in the accepted style, refused ones in the rejected style, unjudged dim, the
    correction in its own style. Caught: every node in one style, the correction unstyled."""
    label = [token_label(tokenizer, t) for t in ids]
    ansi = ansi_of(ExplainView(tokenizer, "draft", 3, greedy=True).panel(correction_round(ids)))
    for node in PATH:
        assert sgr(KIND_STYLES[TokenKind.ACCEPTED]) + label[node] in ansi
    for node in (1, 3, 5, 6):
        assert sgr(KIND_STYLES[TokenKind.REJECTED]) + label[node] in ansi
    assert sgr("dim") + label[4] in ansi
    assert sgr(KIND_STYLES[TokenKind.CORRECTION]) + label[7] in ansi
    assert sgr(KIND_STYLES[TokenKind.ACCEPTED]) + label[4] not in ansi


def test_explain_tree_bonus_hangs_under_the_leaf(tokenizer, ids):
    """A path that ends at a leaf gets the bonus, drawn under that leaf and named as one."""
    label = [token_label(tokenizer, t) for t in ids]
    r = tree_round(
        ids[:3], [-1, -1, 0], ["accepted", "rejected", "accepted"], [0, 2], ids[8], TokenKind.BONUS
    )
    text = text_of(ExplainView(tokenizer, "draft", 3, greedy=True).panel(r))
    leaf = line_with(text, f"✓ {label[2]}")
    bonus = line_with(text, f"→ {label[8]}  bonus")
    assert bonus[0] == leaf[0] + 1 and bonus[1].index("→") > leaf[1].index("✓")
    assert "reached a leaf" in text and f"Bonus: {label[8]}" in text
    ansi = ansi_of(ExplainView(tokenizer, "draft", 3, greedy=True).panel(r))
    assert sgr(KIND_STYLES[TokenKind.BONUS]) + label[8] in ansi


def test_explain_tree_correction_at_the_root(tokenizer, ids):
    """No child of the root kept: the correction is a child of the root, beside the refused nodes."""
    label = [token_label(tokenizer, t) for t in ids]
    r = tree_round(ids[:2], [-1, -1], ["rejected", "rejected"], [], ids[8], TokenKind.CORRECTION)
    text = text_of(ExplainView(tokenizer, "draft", 3, greedy=True).panel(r))
    first = line_with(text, f"✗ {label[0]}")
    correction = line_with(text, f"→ {label[8]}  correction")
    assert correction[1].index("→") == first[1].index("✗") and correction[0] > first[0]
    assert "No child of the root (2 children tried)" in text
    assert "the accepted path is empty (no child of the root kept)" in text
    assert "accepted 0" in text.splitlines()[0]


def test_explain_sampling_tree_shows_acceptance_and_u_for_judged_nodes(tokenizer, ids):
    """Sampling: each judged node adds its acceptance probability and uniform; the unjudged one stays
    without target numbers; the outcome names the renormalised rule."""
    label = [token_label(tokenizer, t) for t in ids]
    text = text_of(
        ExplainView(tokenizer, "draft", 3, greedy=False).panel(correction_round(ids, greedy=False))
    )
    assert line_with(text, f"✓ {label[0]}  q {prob(Q[0])}  p {prob(P[0])}  accept 0.900  u 0.100")
    assert line_with(text, f"✗ {label[3]}  q {prob(Q[3])}  p {prob(P[3])}  accept 0.200  u 0.800")
    unjudged = line_with(text, f"· {label[4]}")[1]
    assert "accept" not in unjudged and "  p " not in unjudged
    assert "Every child of the last accepted node" in text and f"Correction: {label[7]}" in text


def test_explain_summary_counts_tree_rounds_at_their_depth(tokenizer, ids):
    view = ExplainView(tokenizer, "draft", 3, greedy=True)
    view.panel(correction_round(ids))
    summary = text_of(view.summary(), width=200)
    assert "at k = 3 (every round)" in summary  # the tree's depth, not its 7 nodes
    assert "1 tree round: drafted counts every node verified" in summary
    assert "accepted / drafted = 2/7" in summary


def test_explain_chain_rounds_keep_the_table(tokenizer, ids):
    """A chain round (Round.tree None) still gets its table, its marks and its position words, and no
    tree."""
    chain = Round(
        index=0, drafted=ids[:3], draft_probs=[1.0] * 3, target_probs=[],
        target_argmax=[ids[0], ids[5], ids[6], ids[7]],
        accept_probs=[1.0] * 3, uniforms=[], accepted=1, token=ids[5], kind=TokenKind.CORRECTION,
        committed=[ids[0], ids[5]], draft_time=0, verify_time=0, elapsed=0.1,
    )  # fmt: skip
    text = text_of(ExplainView(tokenizer, "draft", 3, greedy=True).panel(chain))
    assert "round 1 · drafted 3 · accepted 1" in text.splitlines()[0]
    assert "draft token" in text and "target argmax" in text
    assert "✓ accepted" in text and "✗ rejected" in text and "– not checked" in text
    assert "Position 2 was rejected" in text
    assert TREE_ROOT not in text and "nodes" not in text and "→" not in text


# --------------------------------------------------------------------------- live view and plain output


def test_draft_words_name_a_trees_nodes_and_depth(ids):
    r = correction_round(ids)
    assert draft_words(r) == "k 3 (cost model) · nodes 7 · depth 3 · accepted 2"
    chain = Round(**{**r.__dict__, "tree": None})
    assert draft_words(chain) == "k 3 (cost model) · drafted 7 · accepted 2"


def test_live_status_names_the_nodes_and_strikes_no_tree_node(tokenizer, ids):
    """After a tree round the status line says its node count, each part whole within the width, and
    the text is only what was committed (the refused nodes are not struck through inline, as a chain's
    rejected drafts are). Caught: the six refused nodes read as one struck-through continuation."""
    view = TokenView(tokenizer, "draft", 3)
    view.add(correction_round(ids))
    assert view.body().plain == view.text.plain
    assert not any(span.style == KIND_STYLES[TokenKind.REJECTED] for span in view.body().spans)
    for width in (60, 200):
        lines = text_of(view.status(), width=width).splitlines()
        assert all(len(line) <= width for line in lines), lines
        assert any("nodes 7 depth 3 accepted 2" in line for line in lines), lines
    chain = Round(**{**correction_round(ids, index=1).__dict__, "tree": None})
    view.add(chain)  # a chain round's rejected drafts are struck through, as before
    assert any(span.style == KIND_STYLES[TokenKind.REJECTED] for span in view.body().spans)
    status = text_of(view.status(), width=200)
    assert "nodes" not in status and "drafted 7 accepted 2" in status


def test_plain_output_is_the_committed_text_only(ids):
    out = io.StringIO()
    PlainWriter(out).round(Round(**{**correction_round(ids).__dict__, "text": "kept"}))
    assert out.getvalue() == "kept"


# --------------------------------------------------------------------------- rounds from the engine


@pytest.fixture(scope="module")
def pair():
    import specli

    return specli.load(device="cpu")


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_engine_tree_rounds_draw_every_node_once(pair, temperature):
    """The embedded pair with --tree 6: every tree round's panel has one line per node under a tree
    guide, as many ✓ as the accepted path is long, one correction or bonus line of the round's kind;
    the live view ends with the generated text, its status naming the last round's nodes."""
    import re

    rounds = list(
        pair.stream(PROMPT_TEXT, max_new_tokens=24, tree=6, temperature=temperature, seed=1, record_top=3)
    )
    trees = [r for r in rounds if r.tree is not None and r.tree.size]
    assert trees, "the engine drafted no tree"
    view = ExplainView(pair.tokenizer, "draft", 4, greedy=temperature == 0)
    live = TokenView(pair.tokenizer, "draft", 4)
    for r in rounds:
        text = text_of(view.panel(r), width=160)
        live.add(r)
        if r.tree is None or not r.tree.size:
            continue
        marks = re.findall(r"(?:├── |└── )([✓✗·]) ", text)
        assert len(marks) == r.tree.size and marks.count("✓") == r.accepted, text
        assert len(re.findall(rf"(?:├── |└── )→ .*  {r.kind.value} *│", text)) == 1, text
        assert f"nodes {r.nodes} · depth {r.tree.depth} · accepted {r.accepted}" in text.splitlines()[0]
        assert f"nodes {r.nodes} " in text_of(live.status(), width=400)
        assert not any(span.style == KIND_STYLES[TokenKind.REJECTED] for span in live.body().spans)
    live.finish()
    assert live.text.plain == visible("".join(r.text for r in rounds))  # committed text, nothing else


def test_explain_drawn_children_show_each_try_and_the_residual_rule(tokenizer, ids):
    """A tree whose children were drawn from q (TreeRecord.tried_q): each judged node shows q′ and p′ at
    its try beside q, p, the acceptance min(1, p′/q′) and its draw; the outcome names the residual rule.
    Catches the view dropping the try's numbers or naming the deterministic rule for a drawn tree."""
    label = [token_label(tokenizer, t) for t in ids]
    tried_q = [0.4, 0.3, 0.2, 0.6, 0.0, 0.1, 0.9]
    tried_p = [0.5, 0.2, 0.1, 0.12, 0.0, 0.3, 0.05]
    base = correction_round(ids, greedy=False)
    assert base.tree is not None
    drawn = dataclasses.replace(base, tree=dataclasses.replace(base.tree, tried_p=tried_p, tried_q=tried_q))
    text = text_of(ExplainView(tokenizer, "draft", 3, greedy=False).panel(drawn))
    assert line_with(text, f"✗ {label[3]}  q {prob(Q[3])}  p {prob(P[3])}  q′ 0.600  p′ 0.120  accept 0.200")
    assert "q′" not in line_with(text, f"· {label[4]}")[1]  # never tried: no stage numbers
    assert "drawn from q without replacement" in text and "min(1, p′(x)/q′(x))" in text
    plain = text_of(ExplainView(tokenizer, "draft", 3, greedy=False).panel(base))
    assert "q′" not in plain and "without replacement" not in plain


def heads_round(ids, accepted: int, kind: TokenKind) -> Round:
    """A chain round of strategy heads (4 blockwise heads, greedy) that kept `accepted` drafts."""
    drafted = ids[:4]
    return Round(
        index=0, drafted=drafted, draft_probs=[1.0] * 4, target_probs=[],
        target_argmax=drafted[:accepted] + [ids[8]] + ids[4 : 7 - accepted],
        accept_probs=[1.0 if i < accepted else 0.0 for i in range(4)], uniforms=[], accepted=accepted,
        token=ids[8], kind=kind, committed=drafted[:accepted] + [ids[8]], draft_time=0, verify_time=0,
        elapsed=0.1, draft_limit=4, draft_reason="cost model", token_source=[(ids[8], 0.6)],
        info={"head": "heads", "parallel": True, "heads": 4},
    )  # fmt: skip


def test_explain_names_each_blockwise_head_and_where_the_block_broke(tokenizer, ids):
    """Strategy heads: each drafted position is its head's guess (the table's input column says which
    head, not a MASK placeholder), and the round says which heads agreed and where the block broke, or
    that it held. Catches heads explained as a PARD drafter reading MASK tokens."""
    broke = text_of(
        ExplainView(tokenizer, "heads", 4, greedy=True).panel(heads_round(ids, 2, TokenKind.CORRECTION)), 400
    )
    assert "Heads 1-2 agreed; the block broke at head 3." in broke
    assert "rejected" in line_with(broke, "  head 3 ")[1] and "MASK" not in broke
    held = text_of(
        ExplainView(tokenizer, "heads", 4, greedy=True).panel(heads_round(ids, 4, TokenKind.BONUS)), 400
    )
    assert "All 4 agreed with the target: the block held" in held
    none = text_of(
        ExplainView(tokenizer, "heads", 4, greedy=True).panel(heads_round(ids, 0, TokenKind.CORRECTION)), 400
    )
    assert "No head agreed; the block broke at head 1." in none


def test_explain_names_what_each_sequential_head_read(tokenizer, ids):
    """Sequential heads: the round says they drafted one after another (head 1 from the pending token),
    and each row from head 2 on names the draft its head read (catches them explained as Medusa's heads,
    all reading one state)."""
    label = [token_label(tokenizer, t) for t in ids]
    base = heads_round(ids, 2, TokenKind.CORRECTION)
    sequential = dataclasses.replace(base, info={**base.info, "sequential": True})
    text = text_of(ExplainView(tokenizer, "heads", 4, greedy=True).panel(sequential), 400)
    assert "4 sequential heads drafted one after another" in text and "head 1 read the pending token" in text
    assert "Heads 1-2 agreed; the block broke at head 3." in text
    assert f"head 3 after {label[1]}" in line_with(text, "  head 3 ")[1]
    medusa = text_of(ExplainView(tokenizer, "heads", 4, greedy=True).panel(base), 400)
    assert "sequential" not in medusa and " after " not in line_with(medusa, "  head 3 ")[1]
