"""The `specli explain` view: one panel per round that walks through draft, verify and commit, and a
closing summary with the analytic expectation of the mean acceptance length. Consumes Round events.

Whitespace is made visible (↵ newline, ⇥ tab, · space in whitespace-only tokens), so a token that is only
whitespace is never a blank cell or a blank line, and the context stays on one line.

A chain round's drafts are a table, one row per position. A token-tree round (`Round.tree`) is drawn as
the tree itself: the root is the pending token (the last committed one, after the text so far), each
node shows its token, the drafter's q, the target's p where judged and ✓ (on the kept path) / ✗
(refused) / · (under a refused node, never judged), and the correction or bonus hangs under the kept
path's last node."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from specli.engine.events import Round, Stats, TokenKind, expected_acceptance_length
from specli.engine.tree import TreeRecord
from specli.render.plain import draft_words
from specli.render.styles import KIND_STYLES, shown
from specli.strategies import Strategy
from specli.text import IncrementalDecoder
from specli.wording import count, head_name, stop_text

CONTEXT_CHARS = 80
TREE_ROOT = "▸ after the text so far"  # a tree's root: the pending token, which the round does not carry
TREE_MARKS = {"accepted": "✓", "rejected": "✗", "unjudged": "·"}


def prob(value: float) -> str:
    """A probability with three decimals, or two significant digits when smaller than 0.001."""
    return f"{value:.3f}" if value >= 0.001 or value == 0 else f"{value:.1e}"


def token_label(tokenizer: Any, token: int) -> str:
    """A single token, quoted, on one line with its whitespace visible: ' return', '↵    return',
    '↵·×12' (a whitespace-only token shows every space as ·); special tokens by name."""
    text = tokenizer.decode([token], skip_special_tokens=False)
    label = shown(text, spaces=not text.strip())
    quote = '"' if "'" in label and '"' not in label else "'"
    return f"{quote}{label}{quote}"


def piece_text(piece: str) -> str:
    """Decoded output text on one line: ↵ and ⇥ for newlines and tabs, · for spaces when the piece is
    only whitespace (so it is never blank)."""
    return shown(piece, spaces=not piece.strip())


class ExplainView:
    """Builds the per-round panels; keeps the committed text for the context line."""

    def __init__(
        self,
        tokenizer: Any,
        strategy: str,
        k: int,
        greedy: bool,
        top: int = 5,
        prompt_ids: list[int] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.strategy = strategy
        self.k = k
        self.greedy = greedy
        self.top = top
        self.decoder = IncrementalDecoder(tokenizer)
        self.text = Text(shown(self.decoder.push(list(prompt_ids or []))), "dim")  # the prompt, as context
        self.stats = Stats()
        self.drafted_ks: list[int] = []  # each round's k: the drafts the target verified (a tree: its depth)
        self.tree_rounds = 0

    def _label(self, token: int) -> str:
        return token_label(self.tokenizer, token)

    def _drafter_line(self, r: Round) -> Text:
        info = r.info or {}
        if self.strategy == Strategy.LOOKUP:
            if info.get("ngram"):
                chosen = (
                    f"; the draft's first token followed it {info['chosen']} of the {info['followed']} "
                    "times (the most frequent), and each next one continues the longest match the same way."
                    if info.get("followed", 1) > 1
                    else "; the draft follows what came after it."
                )
                return Text(
                    f"lookup: the last {info['ngram']}-gram also occurs at token {info['match_start']} "
                    f"(of {info['context_length']}){chosen}"
                )
            return Text(
                "lookup: no earlier occurrence of the last n-gram; this round is a plain target step."
            )
        if self.strategy == Strategy.SELF:
            return Text(
                f"self: the target's first {count(info['exit_layer'], 'layer')} + its LM head drafted."
                if isinstance(info.get("exit_layer"), int)
                else "self: the target's first layers + its LM head drafted."
            )
        if self.strategy == Strategy.EAGLE:
            if not r.drafted:
                return Text("eagle: no target features yet; this round is a plain target step.")
            layers = ", ".join(str(i) for i in info.get("target_layers", []))
            kind = head_name(info)
            if info.get("parallel"):
                return Text(
                    f"eagle: a {kind} head proposed {count(len(r.drafted), 'token')} in ONE forward from the "
                    f"target's hidden states entering layers {layers}: position 1 from the last true "
                    f"feature{self._mask_words(r)}."
                )
            return Text(
                f"eagle: an {kind} head proposed {count(len(r.drafted), 'token')} from the target's hidden "
                f"states entering layers {layers} (the last drafts from its own states)."
            )
        if self.strategy == Strategy.HEADS:
            return Text(self._heads_words(r))
        if self.strategy == Strategy.NONE:
            return Text("plain decoding: no draft; the target adds one token.")
        if info.get("parallel") and r.drafted:
            return Text(
                f"draft: the drafter model proposed {count(len(r.drafted), 'token')} in ONE forward "
                f"(parallel drafting): position 1 read the last committed token{self._mask_words(r)}."
            )
        return Text(f"draft: the drafter model proposed {count(len(r.drafted), 'token')}.")

    @staticmethod
    def _heads_words(r: Round) -> str:
        """Which of the blockwise heads agreed with the target and where the block broke."""
        if not r.drafted:
            return "heads: no target state yet; this round is a plain target step."
        n, kept = (r.tree.depth if r.tree is not None else len(r.drafted)), r.accepted
        words = (
            f"heads: {count(n, 'head')} read the target's last hidden state (from the forward that gave "
            f"the pending token; no forward of their own) and each guessed its own position, head i the "
            f"token i places ahead. "
        )
        if (r.info or {}).get("sequential"):
            words = (
                f"heads: {count(n, 'sequential head')} drafted one after another from the target's last "
                f"hidden state (from the forward that gave the pending token; no forward of their own): "
                f"head 1 read the pending token, head i the state of head i-1 and its draft. "
            )
        if r.tree is not None:
            return words + "The tree takes each depth's candidates from that depth's head."
        if kept == n:
            return words + f"All {n} agreed with the target: the block held, and the target adds a bonus."
        agreed = f"heads 1-{kept} agreed" if kept > 1 else "head 1 agreed" if kept else "no head agreed"
        return words + f"{agreed.capitalize()}; the block broke at head {kept + 1}."

    @staticmethod
    def _mask_words(r: Round) -> str:
        """', positions 2-4 read MASK placeholders, so none saw the draft before it' ('' for k = 1)."""
        n = len(r.drafted)
        if n < 2:
            return ""
        where = "position 2" if n == 2 else f"positions 2-{n}"
        return f", {where} read MASK placeholders, so no draft saw the one before it"

    def _draft_table(self, r: Round) -> Table:
        table = Table(box=None, pad_edge=False, header_style="bold")
        parallel = bool((r.info or {}).get("parallel"))
        table.add_column("#", justify="right")
        if parallel:  # what each position read in the drafter's single forward
            table.add_column("input")
        table.add_column("draft token")
        if self.greedy:
            table.add_column("target argmax")
        else:
            for name in ("q(x)", "p(x)", "min(1, p/q)", "u"):
                table.add_column(name, justify="right")
        table.add_column("")
        for i, token in enumerate(r.drafted):
            checked = i <= r.accepted
            ok = i < r.accepted
            mark = Text("✓ accepted", KIND_STYLES[TokenKind.ACCEPTED]) if ok else Text("✗ rejected", "bold")
            if not checked:
                mark = Text("– not checked", "dim")
            label = Text(
                self._label(token), KIND_STYLES[TokenKind.ACCEPTED] if ok else KIND_STYLES[TokenKind.REJECTED]
            )
            lead: list[Any] = [str(i + 1)]
            if parallel and self.strategy == Strategy.HEADS:
                after = (
                    f" after {self._label(r.drafted[i - 1])}"
                    if i and (r.info or {}).get("sequential")
                    else ""
                )
                lead.append(Text(f"head {i + 1}{after}", "dim"))
            elif parallel:
                lead.append(Text("MASK", "italic") if i else Text("last token", "dim"))
            table.add_row(*lead, label, *self._check_cells(r, i), mark)
        return table

    def _check_cells(self, r: Round, i: int) -> list[str]:
        """The verify columns of draft position i: the target argmax (greedy), or q, p, min(1, p/q) and u.
        A position after the rejection was never judged: only the drafter's q is shown, the target's
        cells stay empty."""
        checked = i <= r.accepted
        if self.greedy:
            return [self._label(r.target_argmax[i]) if checked else ""]
        judged = [r.target_probs[i], r.accept_probs[i], r.uniforms[i]] if checked else []
        return [prob(r.draft_probs[i]), *(prob(v) for v in judged)] + [""] * (3 - len(judged))

    def _top(self, r: Round) -> str:
        entries = r.token_source[: self.top]
        return ", ".join(f"{self._label(t)} {prob(p)}" for t, p in entries)

    def _own(self, r: Round) -> str:
        """The added token's own probability in the distribution it came from, saying so when it is not
        among the top entries shown (the engine records it even then); "" when not recorded."""
        probability = dict(r.token_source).get(r.token)
        if probability is None:
            return ""
        shown_top = [t for t, _ in r.token_source[: self.top]]
        outside = "" if r.token in shown_top else f", not in the top {self.top}"
        return f" (probability {prob(probability)}{outside})"

    @staticmethod
    def _tree(r: Round) -> TreeRecord | None:
        """The round's token tree, None for a chain (or a tree round that drafted nothing)."""
        return r.tree if r.tree is not None and r.tree.size else None

    def _tree_line(self, r: Round, tree: TreeRecord) -> Text:
        kept = f"{count(r.accepted, 'node')} long" if r.accepted else "empty (no child of the root kept)"
        return Text(
            f"tree: {count(tree.size, 'node')} under the pending token, up to depth {tree.depth}; the target "
            "verified every node in ONE forward (each seeing only its ancestors) and keeps one path: the "
            f"accepted path is {kept}."
        )

    def _node_label(self, r: Round, tree: TreeRecord, node: int, at: dict[int, int]) -> Text:
        """'✓ 'token'  q 0.812  p 0.640' (sampling adds the acceptance probability and u); an unjudged
        node shows only q, dimmed."""
        status = tree.status[node]
        styles = {"accepted": KIND_STYLES[TokenKind.ACCEPTED], "rejected": KIND_STYLES[TokenKind.REJECTED]}
        marks = {"accepted": KIND_STYLES[TokenKind.ACCEPTED], "rejected": "bold"}
        judged = status != "unjudged"
        label = Text(style="" if judged else "dim")
        label.append(TREE_MARKS.get(status, "?"), marks.get(status, "dim"))
        label.append(" ")
        label.append(self._label(tree.tokens[node]), styles.get(status, "dim"))
        label.append(f"  q {prob(tree.draft_probs[node])}")
        if judged and tree.target_probs:
            label.append(f"  p {prob(tree.target_probs[node])}")
        if judged and tree.sampled and node < len(tree.tried_q):  # the multi-candidate rule's stage
            label.append(f"  q′ {prob(tree.tried_q[node])}  p′ {prob(tree.tried_p[node])}")
        i = at[node]  # the node's place in the round's drafted order (accept_probs, uniforms)
        if judged and not self.greedy and i < len(r.accept_probs) and i < len(r.uniforms):
            label.append(f"  accept {prob(r.accept_probs[i])}  u {prob(r.uniforms[i])}")
        return label

    def _draft_tree(self, r: Round, tree: TreeRecord) -> Tree:
        """The token tree under its root (the pending token), children in the order they were tried; the
        correction or bonus is the last child of the kept path's last node (of the root when no node was
        kept)."""
        order = tree.path + [i for i in range(tree.size) if i not in set(tree.path)]  # Round.drafted's
        at = {node: i for i, node in enumerate(order)}
        root = Tree(Text(TREE_ROOT, "dim"), guide_style="dim")
        branches: list[Tree] = []
        for node, parent in enumerate(tree.parents):  # a parent comes before its children
            under = root if parent < 0 else branches[parent]
            branches.append(under.add(self._node_label(r, tree, node, at)))
        last = branches[tree.path[-1]] if tree.path else root
        style = KIND_STYLES[r.kind]
        last.add(Text.assemble(("→ ", style), (self._label(r.token), style), "  ", (r.kind.value, style)))
        return root

    def _tree_outcome(self, r: Round, tree: TreeRecord) -> Text:
        """Why the tree round ended as it did: every child of the kept path's last node refused (a
        correction from what is left of the target's distribution there), or the path reached a leaf (a
        bonus from the target's distribution after it)."""
        last = tree.path[-1] if tree.path else -1
        where = f"the last accepted node {self._label(tree.tokens[last])}" if last >= 0 else "the root"
        tried = sum(1 for parent in tree.parents if parent == last)
        style = KIND_STYLES[r.kind]
        out = Text()
        if r.kind is TokenKind.CORRECTION:
            if self.greedy:
                out.append(
                    f"No child of {where} ({count(tried, 'child', 'children')} tried) is the target's argmax "
                    "there"
                )
                if r.token_source:
                    out.append(f" (the target's top entries there: {self._top(r)})")
                out.append(".\nCorrection (the argmax): ")
            elif tree.sampled:
                out.append(
                    f"Every child of {where} was refused ({count(tried, 'child', 'children')} drawn from q "
                    "without replacement, tried in draw order, each accepted with probability "
                    "min(1, p′(x)/q′(x)): p′ what the refusals before it left of the target's distribution, "
                    "normalize(max(0, p′ − q′)) after each, q′ the drafter's without the children drawn "
                    "before it). The correction is drawn from the last p′"
                )
            else:
                out.append(
                    f"Every child of {where} was refused ({count(tried, 'child', 'children')} tried in "
                    "order, each accepted with probability p′(x), p′ the target's distribution without the "
                    "children refused before it, renormalised). The correction is drawn from p′ without all "
                    "of them"
                )
                if r.token_source:
                    out.append(f"; its top entries: {self._top(r)}")
                out.append(".\nCorrection: ")
        else:
            depth = f"depth {len(tree.path)}" if tree.path else "the root"
            out.append(
                f"The accepted path reached a leaf ({where}, {depth}), so the target's distribution after it "
                "(computed in the same forward) gives a bonus token"
            )
            if r.token_source:
                out.append(f"; its top entries: {self._top(r)}")
            out.append(".\nBonus: ")
        out.append(self._label(r.token), style)
        out.append(self._own(r))
        return out

    def _outcome(self, r: Round) -> Text:
        token = self._label(r.token)
        style = KIND_STYLES[r.kind]
        out = Text()
        if r.kind is TokenKind.CORRECTION:
            position = r.accepted + 1
            if self.greedy:
                out.append(f"Position {position} was rejected: the draft is not the target's argmax")
                if r.token_source:
                    out.append(f" (the target's top entries there: {self._top(r)})")
                out.append(".\nCorrection (the argmax): ")
            else:
                out.append(
                    f"Position {position} was rejected (u ≥ min(1, p/q)). The correction is drawn from the "
                    "residual normalize(max(0, p − q))"
                )
                if r.token_source:
                    out.append(f"; its top entries: {self._top(r)}")
                out.append(".\nCorrection: ")
            out.append(token, style)
            out.append(self._own(r))
            if (r.info or {}).get("token_in_draft_vocab") is False:
                out.append(
                    f"\nIt lies outside the head's {r.info['draft_vocab']}-token draft vocabulary: the head "
                    "could not have drafted it."
                )
        elif r.drafted:
            out.append(
                f"{self._all_accepted(len(r.drafted))}, so the target's distribution at position "
                f"{len(r.drafted) + 1} (computed in the same forward) gives a bonus token"
            )
            if r.token_source:
                out.append(f"; its top entries: {self._top(r)}")
            out.append(".\nBonus: ")
            out.append(token, style)
            out.append(self._own(r))
        else:
            out.append("No draft this round, so it is a plain target step: the target's next token ")
            if r.token_source:
                out.append(f"from its top entries {self._top(r)}: ")
            out.append(token, style)
            out.append(self._own(r))
        return out

    @staticmethod
    def _all_accepted(n: int) -> str:
        """'All 3 drafts accepted', 'The 1 draft accepted'."""
        return "The 1 draft accepted" if n == 1 else f"All {n} drafts accepted"

    def _cut_line(self, r: Round) -> Text | None:
        """Where a draft was cut at --draft-p-min: the token the drafter was most sure of there and its
        probability against the threshold (None when the round was not cut by the threshold)."""
        info = r.info or {}
        if "cut_token" not in info:
            return None
        token = self._label(info["cut_token"])
        below = (
            f"has probability {prob(info['cut_prob'])} < --draft-p-min {prob(info['p_min'])} (its softmax "
            "at temperature 1, what the threshold reads)"
        )
        if not r.drafted:
            return Text(f"The drafter's likeliest first token {token} {below}, so it drafted nothing.")
        return Text(
            f"The draft stopped before position {len(r.drafted) + 1}: there the drafter's likeliest token "
            f"{token} {below}."
        )

    def panel(self, r: Round) -> Panel:
        """The panel for one round; call rounds in order."""
        self.stats.observe(r)
        tree = self._tree(r)
        self.drafted_ks.append(tree.depth if tree is not None else len(r.drafted))
        self.tree_rounds += tree is not None
        context = self.text[-CONTEXT_CHARS:] if len(self.text) > CONTEXT_CHARS else self.text.copy()
        committed = Text()
        for token, kind in zip(r.committed, r.committed_kinds, strict=True):
            piece = self.decoder.push([token])
            if piece:
                committed.append(piece_text(piece), KIND_STYLES[kind])
                self.text.append(shown(piece), KIND_STYLES[kind])
        parts: list[Any] = [
            Text.assemble(
                ("context: ", "dim"), ("…" if len(self.text) > CONTEXT_CHARS else "", "dim"), context
            ),
            self._drafter_line(r),
        ]
        cut = self._cut_line(r)
        if cut is not None:
            parts.append(cut)
        if tree is not None:
            parts += [self._tree_line(r, tree), self._draft_tree(r, tree), self._tree_outcome(r, tree)]
        else:
            if r.drafted:
                parts.append(self._draft_table(r))
            parts.append(self._outcome(r))
        parts.append(
            Text.assemble(("committed: ", "bold"), committed or Text("(incomplete character)", "dim"))
        )
        if r.stop is not None:
            parts.append(Text(stop_text(r.stop, self.stats.tokens) or "", "bold"))
        title = f"round {r.index + 1} · {draft_words(r)}"
        return Panel(Group(*parts), title=title, title_align="left")

    def summary(self) -> Panel:
        s = self.stats
        lines = [
            f"{count(s.rounds, 'round')} · {count(s.tokens, 'token')} · mean acceptance length "
            f"{s.mean_acceptance_length:.2f}"
        ]
        if s.drafted:
            alpha = s.accept_prob
            judged = s.accepted + s.rejections
            lines.append(
                f"acceptance rate = accepted / drafted = {s.accepted}/{s.drafted} = {s.acceptance_rate:.3f}"
            )
            lines.append(
                f"α = accepted / (accepted + rejections) = {s.accepted}/{judged} = {alpha:.3f}: the "
                "probability that a draft the target judged is kept (drafts after a rejection are not judged)"
            )
            lines.append(self._expected_line(alpha))
            if self.tree_rounds:
                lines.append(
                    f"{count(self.tree_rounds, 'tree round')}: drafted counts every node verified (a tree "
                    "keeps one path of them), and k is each tree's depth."
                )
        return Panel(Text("\n".join(lines)), title="summary", title_align="left")

    def _expected_line(self, alpha: float) -> str:
        """E(α, k) = (1 − α^(k+1)) / (1 − α) against the observed τ. Rounds draft different k (chosen per
        round, cut at a threshold or the budget), so E is the mean over rounds of E(α, k) at each round's
        own drafted k: τ's expectation for those very rounds."""
        ks = self.drafted_ks
        expected = sum(expected_acceptance_length(alpha, k) for k in ks) / len(ks)
        observed = f"observed {self.stats.mean_acceptance_length:.2f}"
        formula = "analytic E = (1 − α^(k+1)) / (1 − α)"
        if len(set(ks)) == 1:
            return f"{formula} = {expected:.2f} tokens per round at k = {ks[0]} (every round), {observed}"
        return (
            f"{formula} at each round's own k, averaged over the rounds (k drafted: mean "
            f"{sum(ks) / len(ks):.2f}, {min(ks)}–{max(ks)}) = {expected:.2f} tokens per round, {observed}"
        )
