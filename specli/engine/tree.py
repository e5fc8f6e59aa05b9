"""Token trees (docs/design.md §14): several continuations drafted in one round and verified in one
target forward. Pure functions over a tree's shape; no model code.

A tree hangs under its root, the pending token (the last committed one, which the target has not run).
Its N nodes are numbered 0..N-1 in topological order (a parent before its children); `parents[i]` is
node i's parent, -1 for the root. Children of one parent appear in the order verification tries them
(most likely first). In a verify forward the root is input row 0 and node i is row i + 1.

A chain of k drafts is the tree whose parents are [-1, 0, 1, .., k-2].

Importable without torch (the draft-length controller and the events are pure Python): only
`ancestor_mask` builds a tensor, and `grow_tree` calls methods of the ones it is given.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

ROOT = -1


def chain_parents(k: int) -> list[int]:
    """The parents of a chain of k nodes: [-1, 0, .., k-2]."""
    return list(range(-1, k - 1))


def check_parents(parents: Sequence[int]) -> None:
    """ValueError unless every parent is the root or an earlier node."""
    for i, parent in enumerate(parents):
        if not ROOT <= parent < i:
            raise ValueError(f"node {i}'s parent {parent} is not the root (-1) or an earlier node")


def depths(parents: Sequence[int]) -> list[int]:
    """Each node's depth: 1 for the root's children."""
    out: list[int] = []
    for parent in parents:
        out.append(1 if parent == ROOT else out[parent] + 1)
    return out


def children(parents: Sequence[int]) -> list[list[int]]:
    """[row] -> the nodes whose parent is that verify row (row 0 the root, row i + 1 node i), in order."""
    out: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, parent in enumerate(parents):
        out[parent + 1].append(i)
    return out


def path_to(parents: Sequence[int], node: int) -> list[int]:
    """The nodes from the root's child down to `node` (empty for the root, -1)."""
    path = []
    while node != ROOT:
        path.append(node)
        node = parents[node]
    return path[::-1]


def ancestor_mask(parents: Sequence[int], device: torch.device | None = None) -> torch.Tensor:
    """[N+1, N+1] bool over verify rows (root first): row r may see row c iff c is r or an ancestor of r
    (every row sees the root)."""
    import torch

    n = len(parents) + 1
    mask = torch.zeros(n, n, dtype=torch.bool)
    mask[:, 0] = True
    for i, parent in enumerate(parents):
        row = i + 1
        mask[row] = mask[parent + 1]
        mask[row, row] = True
    return mask.to(device) if device is not None else mask


def path_probabilities(parents: Sequence[int], probs: Sequence[float]) -> list[float]:
    """Each node's product of draft probabilities from the root down to it (probs[i]: node i's token's
    probability under the drafter given its parent)."""
    out: list[float] = []
    for parent, q in zip(parents, probs, strict=True):
        out.append(q if parent == ROOT else out[parent] * q)
    return out


def ranked_nodes(parents: Sequence[int], scores: Sequence[float]) -> list[int]:
    """Every node, best first (highest score; ties: the earlier node), each preceded by its ancestors:
    every prefix is closed under ancestors. With path probabilities, which never rank a node above its
    ancestors, this is the plain ranking."""
    order: list[int] = []
    seen: set[int] = set()
    for node in sorted(range(len(parents)), key=lambda i: (-scores[i], i)):
        for ancestor in path_to(parents, node):
            if ancestor not in seen:
                seen.add(ancestor)
                order.append(ancestor)
    return order


def best_nodes(parents: Sequence[int], scores: Sequence[float], n: int) -> list[int]:
    """The n best nodes of `ranked_nodes` (closed under ancestors), in node order."""
    return sorted(ranked_nodes(parents, scores)[:n])


def subtree(parents: Sequence[int], keep: Sequence[int]) -> list[int]:
    """The parents of the tree made of the nodes `keep` (ascending, closed under ancestors),
    renumbered 0..len(keep)-1."""
    index = {node: i for i, node in enumerate(keep)}
    return [ROOT if parents[node] == ROOT else index[parents[node]] for node in keep]


@dataclass
class TreeGrowth:
    """A tree grown depth by depth as EAGLE-2 does: each depth expands the `width` nodes of highest path
    probability among the newest depth, each with its `width` most likely children; `select(n)` then
    keeps the n best nodes overall, ancestors included.

    Nodes are recorded with their token, parent and probability under the drafter; `frontier(width)`
    names the nodes to expand next.
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)  # path probabilities
    newest: list[int] = field(default_factory=list)  # the nodes of the last depth added

    def add_children(self, parent: int, tokens: Sequence[int], probs: Sequence[float]) -> list[int]:
        """Add parent's children (most likely first); returns their node numbers."""
        base = 1.0 if parent == ROOT else self.scores[parent]
        added = []
        for token, q in zip(tokens, probs, strict=True):
            added.append(len(self.tokens))
            self.tokens.append(int(token))
            self.parents.append(parent)
            self.probs.append(float(q))
            self.scores.append(base * float(q))
        return added

    def frontier(self, width: int) -> list[int]:
        """The `width` nodes of the newest depth with the highest path probability, in node order."""
        top = heapq.nlargest(width, self.newest, key=lambda i: (self.scores[i], -i))
        return sorted(top)

    def select(self, n: int) -> list[int]:
        """The n best nodes (see `best_nodes`), ascending."""
        return best_nodes(self.parents, self.scores, n)


def frontier_inputs(
    growth: TreeGrowth, frontier: list[int], slots: dict[int, int], prefix: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One depth's drafter forward over `frontier`, after a cache holding `prefix` positions of
    committed context (the pending token last) and then the tree nodes run at earlier depths (`slots`:
    node -> its cache position; the frontier's are added here, after them) -> (visible [w, prefix +
    len(slots)]: each node sees the context, its ancestors' slots and itself; positions [w]: pending's
    position + depth)."""
    import torch

    start = prefix + len(slots)
    visible = torch.zeros(len(frontier), start + len(frontier), dtype=torch.bool)  # [w, L + w]
    visible[:, :prefix] = True
    node_depths = []
    for row, node in enumerate(frontier):
        path = path_to(growth.parents, node)
        for ancestor in path[:-1]:
            visible[row, slots[ancestor]] = True
        slots[node] = start + row
        visible[row, start + row] = True
        node_depths.append(len(path))
    return visible, torch.tensor(node_depths) + (prefix - 1)


def grow_tree(
    first: torch.Tensor,
    expand: Callable[[list[int], TreeGrowth], torch.Tensor],
    depth: int,
    width: int,
    size: int,
) -> tuple[list[int], list[int], list[float]]:
    """Grow a tree as EAGLE-2 does and keep its `size` best nodes -> (tokens, parents, probs) in node
    order (siblings most likely first).

    first [V]: the drafter's distribution after the pending token (the root's children are its top
    `width`); expand(frontier, growth) -> [len(frontier), V]: the drafter's distributions after each
    frontier node (one forward over them, each seeing its own ancestors). Depth by depth the `width`
    frontier nodes of highest path probability get their top `width` children. Children of zero
    probability are never added. One host sync per depth."""
    growth = TreeGrowth()
    values, ids = first.float().topk(min(width, first.shape[-1]))
    growth.newest = _add_top(growth, ROOT, values.tolist(), ids.tolist())
    for _ in range(1, depth):
        frontier = growth.frontier(width)
        if not frontier:
            break
        probs = expand(frontier, growth)  # [w, V]
        values, ids = probs.float().topk(min(width, probs.shape[-1]), -1)  # [w, width]
        values_list, ids_list = values.tolist(), ids.tolist()
        growth.newest = [
            node
            for row, parent in enumerate(frontier)
            for node in _add_top(growth, parent, values_list[row], ids_list[row])
        ]
    keep = growth.select(size)
    return [growth.tokens[i] for i in keep], subtree(growth.parents, keep), [growth.probs[i] for i in keep]


def grow(
    first: torch.Tensor,
    expand: Callable[[list[int], TreeGrowth], torch.Tensor],
    depth: int,
    width: int,
    size: int,
    generator: torch.Generator | None,
    *,
    drawn: bool,
    shape: Sequence[int] | None = None,
) -> tuple[list[int], list[int], list[float], torch.Tensor | None]:
    """A drafter's token tree -> (tokens, parents, probs, q): under sampling (`drawn`) children drawn from
    its distributions (`grow_sampled_tree`, q [N+1, V]; `shape`: the draws follow that rank tree,
    `grow_shaped_tree`), else its top tokens (`grow_tree`, q None)."""
    if drawn and shape is not None:  # deeper than this drafter drafts now: cut
        keep = [node for node, d in enumerate(depths(shape)) if d <= depth]
        return grow_shaped_tree(first, expand, subtree(shape, keep), generator)
    if drawn:
        return grow_sampled_tree(first, expand, depth, width, size, generator)
    return (*grow_tree(first, expand, depth, width, size), None)


def grow_sampled_tree(
    first: torch.Tensor,
    expand: Callable[[list[int], TreeGrowth], torch.Tensor],
    depth: int,
    width: int,
    size: int,
    generator: torch.Generator | None,
) -> tuple[list[int], list[int], list[float], torch.Tensor]:
    """A tree whose children are DRAWN from the drafter's distributions (SpecInfer's form, for sampling;
    `verify_tree_sampled` judges it) -> (tokens, parents, probs, q [N+1, V]: row 0 the distribution the
    root's children were drawn from, row i + 1 node i's; zeros for a node never expanded).

    Each expanded node gets up to `width` distinct children drawn without replacement from its q
    (`sample_distinct`), kept in draw order. Depth by depth the `width` newest nodes of highest path
    probability are expanded, and the tree is the first `size` nodes in the order they were made.

    What keeps it lossless: no node is kept or dropped by its own token. Which nodes a depth expands may
    depend on their tokens (that only decides whether they get children), and the cut to `size` nodes
    follows creation order, which depends on earlier nodes only; so each node's children are a prefix of
    its draws, as many as its ancestors and earlier siblings decided. No ranking of the drawn nodes (the
    cost model's `choose_nodes`) may prune such a tree."""
    growth = TreeGrowth()
    rows: dict[int, torch.Tensor] = {}  # node (ROOT too) -> the distribution its children were drawn from
    growth.newest = _add_drawn(growth, [ROOT], first.float()[None], [width], generator, rows)[0]
    for _ in range(1, depth):
        room = size - len(growth.tokens)
        frontier = growth.frontier(width)[: -(-room // width)] if room > 0 else []
        if not frontier:
            break
        probs = expand(frontier, growth).float()  # [w, V]
        made = _add_drawn(growth, frontier, probs, [width] * len(frontier), generator, rows)
        growth.newest = [node for nodes in made for node in nodes]
    return _drawn_tree(growth, min(size, len(growth.tokens)), rows, first)


def grow_shaped_tree(
    first: torch.Tensor,
    expand: Callable[[list[int], TreeGrowth], torch.Tensor],
    shape: Sequence[int],
    generator: torch.Generator | None,
) -> tuple[list[int], list[int], list[float], torch.Tensor]:
    """A tree of drawn children laid out as `shape` (the parents of a rank tree: a shape node's children,
    in order, are its parent's 1st, 2nd, .. draw; the cost model's `DraftLength.choose_shape`) -> as
    `grow_sampled_tree`. Each node that has children in the shape draws that many from its q, depth by
    depth (one `expand` per depth over those nodes); a draw past q's support leaves its shape node (and
    what hangs below it) out.

    Lossless as the shape was fixed before any draw: every node's children are a prefix of its draws."""
    check_parents(shape)
    wanted = children(shape)  # [row] -> shape nodes, in draw order
    growth = TreeGrowth()
    rows: dict[int, torch.Tensor] = {}
    placed: dict[int, int] = {ROOT: ROOT}  # shape node -> drawn node
    growing = [ROOT] if wanted[0] else []  # shape nodes placed and with children in the shape, one depth
    while growing:
        frontier = [placed[node] for node in growing]
        root = frontier == [ROOT]
        probs = first.float()[None] if root else expand(frontier, growth).float()  # [w, V]
        counts = [len(wanted[node + 1]) for node in growing]
        made_by = _add_drawn(growth, frontier, probs, counts, generator, rows)
        for node, made in zip(growing, made_by, strict=True):
            placed.update(zip(wanted[node + 1], made, strict=False))  # a short draw leaves the last out
        level = [child for node in growing for child in wanted[node + 1]]
        growing = [node for node in level if node in placed and wanted[node + 1]]
    return _drawn_tree(growth, len(growth.tokens), rows, first)


def _drawn_tree(
    growth: TreeGrowth, n: int, rows: dict[int, torch.Tensor], first: torch.Tensor
) -> tuple[list[int], list[int], list[float], torch.Tensor]:
    """The first n nodes of a drawn growth -> (tokens, parents, probs, q [n+1, V]: each expanded node's
    distribution at its row, zeros elsewhere)."""
    import torch

    q = first.new_zeros(n + 1, first.shape[-1], dtype=torch.float32)  # [N+1, V]
    for node, dist in rows.items():
        if node < n:
            q[node + 1] = dist
    return growth.tokens[:n], growth.parents[:n], growth.probs[:n], q


def _add_drawn(
    growth: TreeGrowth,
    parents: list[int],
    probs: torch.Tensor,
    counts: list[int],
    generator: torch.Generator | None,
    rows: dict[int, torch.Tensor],
) -> list[list[int]]:
    """Give each of `parents` up to counts[row] children drawn without replacement from its row of probs
    [w, V] (kept in `rows`) -> each parent's new nodes, in draw order. One host sync."""
    import torch

    from specli.engine.sampling import sample_distinct

    ids, drawn = sample_distinct(probs, max(counts), generator)  # [w, max(counts)]
    host = torch.stack([ids.to(probs.dtype), probs.gather(-1, ids), drawn.to(probs.dtype)]).tolist()
    added: list[list[int]] = []
    for row, parent in enumerate(parents):
        rows[parent] = probs[row]
        draws = zip(*(part[row][: counts[row]] for part in host), strict=True)
        kept = [(int(i), q) for i, q, ok in draws if ok]
        added.append(growth.add_children(parent, [i for i, _ in kept], [q for _, q in kept]))
    return added


def _add_top(growth: TreeGrowth, parent: int, values: list[float], ids: list[int]) -> list[int]:
    """Add the children of positive probability (values descending) -> their node numbers."""
    kept = [(v, i) for v, i in zip(values, ids, strict=True) if v > 0]
    return growth.add_children(parent, [i for _, i in kept], [v for v, _ in kept])


@dataclass(frozen=True)
class TreeRecord:
    """A tree round's nodes as the target judged them (docs/design.md §14), in node order.

    tokens / parents: each node's token and parent (-1: the root, the pending token; parents come
    before their children, siblings in the order they were tried). draft_probs: each token's probability
    under the drafter given its parent (1.0 for a deterministic choice). target_probs: the target's
    probability of each token at its parent (filled when sampling or when the engine records; else
    empty). status: "accepted" (on the kept path), "rejected" (judged and refused) or "unjudged" (under
    a refused node). path: the accepted nodes, root to leaf. tried_p / tried_q (children drawn from
    q only, else empty): p' and q' of each node's token at its try, the renormalised residuals of the
    multi-candidate rule (its acceptance probability was min(1, p'/q')).
    """

    tokens: list[int]
    parents: list[int]
    draft_probs: list[float]
    target_probs: list[float]
    status: list[str]
    path: list[int]
    tried_p: list[float] = field(default_factory=list)
    tried_q: list[float] = field(default_factory=list)

    @property
    def sampled(self) -> bool:
        """Whether the children were drawn from the drafter's q (judged by the multi-candidate rule)."""
        return bool(self.tried_q)

    @property
    def size(self) -> int:
        return len(self.tokens)

    @property
    def depths(self) -> list[int]:
        """Each node's depth (1: a child of the root)."""
        return depths(self.parents)

    @property
    def depth(self) -> int:
        """The deepest node's depth (0 for an empty tree)."""
        return max(self.depths, default=0)

    @property
    def ends_at_leaf(self) -> bool:
        """Whether the accepted path ends at a node without children (then the target adds a bonus)."""
        last = self.path[-1] if self.path else -1
        return last not in self.parents
