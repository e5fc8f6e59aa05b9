"""Print docs/performance.md's blockwise-heads tables from the reports scripts/heads_bench.sh wrote
(docs/data/bench-heads/*.json): every drafter of the embedded pair with its speedup over plain decoding in
its own run (the heads ran in every run beside it), the T = 0.7 trees against their chains, and
SmolLM2-135M's heads on both engines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parent.parent / "docs" / "data" / "bench-heads"
# run -> (its rows, in order, with their labels)
RUNS = {
    "tiny": (("draft", "draft model (`tiny-draft`)"), ("eagle", "EAGLE-3 head (`tiny-eagle3`)"),
             ("heads", "**heads** (`tiny-heads`)")),
    "tiny-eagle1": (("eagle", "EAGLE-1 head (`tiny-eagle1`)"), ("heads", "heads, same run")),
    "tiny-pard": (("draft", "PARD (`tiny-pard`)"), ("heads", "heads, same run")),
    "tiny-peagle": (("eagle", "P-EAGLE head (`tiny-peagle`)"), ("heads", "heads, same run")),
}  # fmt: skip
TREES = (("heads chain", "heads, chain"), ("heads", "heads, tree ≤ 16 per round"),
         ("eagle chain", "EAGLE-3, chain"), ("eagle", "EAGLE-3, tree ≤ 16 per round"))  # fmt: skip


def load(folder: Path, name: str) -> dict | None:
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _positions(row: dict) -> str:
    return " ".join(f"{a:.2f}" for a in row.get("per_position_accept_prob", []))


def _line(run: str, label: str, row: dict, plain: float) -> str:
    tps = row["tokens_per_second"]
    return (
        f"| {run} | {label} | {tps:.1f} | {tps / plain:.2f}× | {row['mean_acceptance_length']:.2f} | "
        f"{row['accept_prob']:.2f} | {row.get('c', 0.0):.2f} | {_positions(row)} |"
    )


def drafters_table(folder: Path = FOLDER) -> str:
    """Each run's plain row, then its drafters: tok/s, × plain (its own run's), τ, α, c, α by position."""
    lines = [
        "| run | drafter | tok/s | × plain | τ | α | c | α by position |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run, rows in RUNS.items():
        report = load(folder, run)
        if report is None:
            return f"(missing {run})"
        overall = report["summary"]["overall"]
        plain = overall["none"]["tokens_per_second"]
        lines.append(f"| {run} | plain decoding | {plain:.1f} | 1.00× | 1.00 | – | – | |")
        lines += [_line("", label, overall[name], plain) for name, label in rows]
    return "\n".join(lines)


def trees_table(folder: Path = FOLDER) -> str:
    """T = 0.7: the heads' and EAGLE-3's chains and per-round drawn trees, from one run."""
    report = load(folder, "tiny-T0.7")
    if report is None:
        return "(missing tiny-T0.7)"
    overall = report["summary"]["overall"]
    plain = overall["none"]["tokens_per_second"]
    lines = [
        "| row | tok/s | × plain | × chain | τ | nodes/round |",
        "|---|---|---|---|---|---|",
        f"| plain decoding | {plain:.1f} | 1.00× | – | 1.00 | – |",
    ]
    for name, label in TREES:
        row = overall[name]
        chain = overall[name if name.endswith("chain") else f"{name} chain"]["tokens_per_second"]
        nodes = row.get("nodes_per_round") or row.get("mean_k") or 0.0
        lines.append(
            f"| {label} | {row['tokens_per_second']:.1f} | {row['tokens_per_second'] / plain:.2f}× | "
            f"{row['tokens_per_second'] / chain:.2f}× | {row['mean_acceptance_length']:.2f} | {nodes:.1f} |"
        )
    return "\n".join(lines)


# SmolLM2-135M's heads (`heads_bench.sh smollm2`): report -> (engine, temperature)
SMOLLM2 = {"smollm2-torch-T0": ("torch", "0"), "smollm2-torch-T0.7": ("torch", "0.7"),
           "smollm2-llama": ("llama.cpp", "0")}  # fmt: skip
SMOLLM2_ROWS = (("heads chain", "heads, chain (k ≤ 4)"), ("heads", "heads, tree ≤ 16 per round"))


def smollm2_table(folder: Path = FOLDER) -> str:
    """SmolLM2's heads beside plain decoding on the same engine: chain and per-round tree (torch; a
    llama.cpp run has the chain alone, its row named `heads`)."""
    lines = [
        "| engine | T | row | tok/s | × plain | × chain | τ | α | c | v |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (engine, temperature) in SMOLLM2.items():
        report = load(folder, name)
        if report is None:
            return f"(missing {name})"
        overall = report["summary"]["overall"]
        plain = overall["none"]["tokens_per_second"]
        lines.append(
            f"| {engine} | {temperature} | plain decoding | {plain:.1f} | 1.00× | – | 1.00 | – | – | – |"
        )  # noqa: E501
        chain_name = "heads chain" if "heads chain" in overall else "heads"
        chain = overall[chain_name]["tokens_per_second"]
        for key, label in SMOLLM2_ROWS if chain_name == "heads chain" else (("heads", SMOLLM2_ROWS[0][1]),):
            row = overall[key]
            tps = row["tokens_per_second"]
            versus = "–" if key == chain_name else f"{tps / chain:.2f}×"
            lines.append(
                f"| {engine} | {temperature} | {label} | {tps:.1f} | {tps / plain:.2f}× | {versus} | "
                f"{row['mean_acceptance_length']:.2f} | {row['accept_prob']:.2f} | {row.get('c', 0.0):.2f} | "
                f"{row.get('v', 0.0):.2f} |"
            )
    return "\n".join(lines)


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER
    print(drafters_table(folder), end="\n\n")
    print(trees_table(folder), end="\n\n")
    print(smollm2_table(folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
