"""Print the token-tree tables of docs/performance.md from the reports scripts/tree_bench.sh wrote
(docs/data/bench-trees/*.json): for each pair and temperature, the chain beside the tree chosen per round and
the fixed sizes, with tokens/s, speedup over plain decoding, τ, nodes per round, v (the verify's cost in
plain target steps) and acceptance by depth."""

from __future__ import annotations

import json
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parent.parent / "docs" / "data" / "bench-trees"


def load(folder: Path, name: str) -> dict | None:
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _depths(row: dict) -> str:
    return " ".join(f"{a:.2f}" for a in row.get("per_position_accept_prob", []))


def _line(label: str, row: dict, plain: float, chain_speedup: float | None) -> str:
    """A row: its tok/s as measured, its speedup over plain decoding in its own run, and that speedup
    over the chain's (each run's plain row is its own baseline, so runs compare through speedups)."""
    tps = row["tokens_per_second"]
    speedup = tps / plain
    versus = f"{speedup / chain_speedup:.2f}×" if chain_speedup else "–"
    nodes = row.get("nodes_per_round") or row.get("mean_k") or 0.0
    elapsed = row.get("elapsed_s") or 0.0
    split = (
        f"{row['draft_time_s'] / elapsed:.0%} / {row['verify_time_s'] / elapsed:.0%}" if elapsed > 0 else "–"
    )
    return (
        f"| {label} | {tps:.1f} | {speedup:.2f}× | {versus} | {row['mean_acceptance_length']:.2f} | "
        f"{nodes:.1f} | {row.get('v', 0.0):.2f} | {split} | {_depths(row)} |"
    )


HEADER = [
    "| row | tok/s | × plain | × chain | τ | nodes/round | v | draft / verify time | acceptance by depth |",
    "|---|---|---|---|---|---|---|---|---|",
]


def pair_table(folder: Path, chain_name: str, tree_name: str, strategies: tuple[str, ...]) -> str:
    """One pair at one temperature: plain, then per strategy its chain, its per-round tree and the fixed
    sizes (and transformers' assisted generation when measured). The chain is the row 'STRATEGY chain'
    of the tree run when its sweep had size 0 (same run), else the strategy's row of the chain run."""
    chain, tree = load(folder, chain_name), load(folder, tree_name)
    if chain is None or tree is None:
        return f"(missing {chain_name} or {tree_name})"
    lines = list(HEADER)
    plain = chain["summary"]["overall"]["none"]["tokens_per_second"]
    lines.append(f"| plain decoding | {plain:.1f} | 1.00× | – | 1.00 | – | – | – | |")
    for strategy in strategies:
        overall = tree["summary"]["overall"]
        same_run = f"{strategy} chain" in overall
        base = overall[f"{strategy} chain"] if same_run else chain["summary"]["overall"].get(strategy)
        if base is None:
            continue
        chain_speedup = base["tokens_per_second"] / plain
        lines.append(_line(f"{strategy} chain (k ≤ {base.get('num_draft_tokens', '')})", base, plain, None))
        tree_plain = overall["none"]["tokens_per_second"]  # the tree run's own baseline
        for label, row in overall.items():
            if row["strategy"] != strategy or label == f"{strategy} chain":
                continue
            name = f"{strategy} tree ≤ {row['tree']} per round" if label == strategy else label
            lines.append(_line(name, row, tree_plain, chain_speedup))
    assisted = (tree.get("transformers") or chain.get("transformers") or {}).get("assisted")
    if assisted:
        tps = assisted["tokens_per_second"]
        lines.append(
            f"| transformers assisted (draft model, same k) | {tps:.1f} | {tps / plain:.2f}× | – | | | | | |"
        )
    return "\n".join(lines)


# (title, chain report, tree report, strategies): each table of docs/performance.md's "Token trees"
TABLES = (
    ("embedded pair, greedy", "tiny-T0", "tiny-T0", ("draft", "eagle")),
    ("embedded pair, T = 0.7", "tiny-T0.7", "tiny-T0.7", ("draft", "eagle")),
    ("embedded pair, lookup on editing prompts", "tiny-lookup", "tiny-lookup", ("lookup",)),
    ("SmolLM2-135M, greedy", "smollm2-chain-T0", "smollm2-tree-T0", ("draft", "eagle")),
    ("SmolLM2-135M, T = 0.7", "smollm2-chain-T0.7", "smollm2-tree-T0.7", ("draft", "eagle")),
    ("SmolLM2-135M, lookup on editing prompts", "smollm2-lookup-chain", "smollm2-lookup-tree", ("lookup",)),
    ("SmolLM2-135M, draft model, greedy", "smollm2-draft-sweep-T0", "smollm2-draft-sweep-T0", ("draft",)),
    (
        "SmolLM2-135M, draft model, T = 0.7",
        "smollm2-draft-sweep-T0.7",
        "smollm2-draft-sweep-T0.7",
        ("draft",),
    ),
    ("SmolLM2-135M, lookup, greedy", "smollm2-lookup-sweep-T0", "smollm2-lookup-sweep-T0", ("lookup",)),
    ("SmolLM2-135M, lookup, T = 0.7", "smollm2-lookup-sweep-T0.7", "smollm2-lookup-sweep-T0.7", ("lookup",)),
)


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER
    for title, chain, tree, strategies in TABLES:
        print(f"{title}\n\n{pair_table(folder, chain, tree, strategies)}\n")


if __name__ == "__main__":
    main()
