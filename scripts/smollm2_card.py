"""The training tables of SmolLM2's drafters in docs/models.md ("Drafters for SmolLM2"), printed as
Markdown from the training.json `specli train` wrote beside each drafter, so every figure there can be
traced to its run. The drafters are not shipped (they ran slower than plain decoding); the runs the card
quotes kept their training.json as docs/data/training/NAME.json. A folder of runs (NAME/training.json,
e.g. specli's cache of trained drafters after `bash scripts/smollm2_train.sh`) prints a new run's card.

    python scripts/smollm2_card.py [docs/data/training | ~/.cache/specli/trained]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DRAFTERS = {"smollm2-135m-eagle3": "EAGLE-3 head", "smollm2-135m-draft": "draft model",
            "smollm2-135m-heads": "blockwise heads"}  # fmt: skip
EVERY = {"smollm2-135m-heads": 250}  # the progress table's rows: every N steps (else every checkpoint)


def chain_tau(agreement: list[float]) -> float:
    """The mean acceptance length of a k = len(agreement) chain if depth d were accepted with
    probability agreement[d] given the depths before it: 1 + a1 + a1·a2 + ... (a proxy for τ; the
    measurement on the held-out prompts is the real one)."""
    tau, kept = 1.0, 1.0
    for a in agreement:
        kept *= a
        tau += kept
    return tau


def _depths(values: list[float], k: int = 4) -> list[float]:
    """A draft model's agreement is measured at depth 1 only: the same value at every depth (i.i.d.)."""
    return list(values) if len(values) > 1 else list(values) * k


def report(folder: Path, name: str) -> dict:
    """NAME's training.json: folder/NAME/training.json (a run's --out), else folder/NAME.json."""
    path = folder / name / "training.json"
    return json.loads((path if path.is_file() else folder / f"{name}.json").read_text(encoding="utf-8"))


def summary_table(folder: Path) -> str:
    lines = [
        "| drafter | trained parameters | steps | tokens seen | hours stepping "
        "| validation agreement by depth | held-out α / τ (k 4, greedy) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, title in DRAFTERS.items():
        r = report(folder, name)
        agreement = (r.get("validation") or {}).get("agreement_by_depth") or []
        measured = ((r.get("measurement") or {}).get("results") or {}).get("trained") or {}
        held = (
            f"{measured['accept_prob']:.2f} / {measured['mean_acceptance_length']:.2f}"
            if measured.get("accept_prob") is not None
            else "–"
        )
        lines.append(
            f"| {title} (`trained:{name}`) | {r['parameters'] / 1e6:.1f} M | {r['steps_done']} | "
            f"{r['tokens_seen'] / 1e6:.2f} M | {r['seconds'] / 3600:.2f} | "
            f"{' '.join(f'{a:.2f}' for a in agreement) or '–'} | {held} |"
        )
    return "\n".join(lines)


def progress_table(folder: Path) -> str:
    """Validation agreement as training went (every checkpoint), and the chain τ it implies at k 4."""
    lines = [
        "| drafter | step | tokens seen | validation agreement by depth | τ implied (k 4) |",
        "|---|---|---|---|---|",
    ]
    for name, title in DRAFTERS.items():
        r = report(folder, name)
        for h in r["history"]:
            if "validation" not in h or h["step"] % EVERY.get(name, 1):
                continue
            agreement = h["validation"]
            lines.append(
                f"| {title} | {h['step']} | {h['tokens'] / 1e3:.0f} k | "
                f"{' '.join(f'{a:.2f}' for a in agreement)} | {chain_tau(_depths(agreement)):.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/data/training").expanduser()
    print(summary_table(folder), end="\n\n")
    print(progress_table(folder))


if __name__ == "__main__":
    main()
