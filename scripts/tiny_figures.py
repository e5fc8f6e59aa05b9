"""Acceptance and speed of the embedded tiny pair on code it never saw (third-party packages, not stdlib).

    python scripts/tiny_figures.py [--prompts 40] [--max-new-tokens 64] [-k 4] [--strategies draft,self]
    python scripts/tiny_figures.py --strategies draft,self,eagle --head embedded:tiny-eagle1

Prompts: the first lines (signature, docstring, a few statements) of functions from packages installed
with specli (rich, click, typer, yaml, pydantic), picked deterministically. Greedy decoding, measured by
specli's bench (plain decoding as the baseline, identity checked); for the packaged prompt sets use
`specli bench --set code`.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import json
import textwrap
from pathlib import Path

import specli
from specli.bench import prompts as prompt_sets
from specli.bench import run as bench

PACKAGES = ("rich", "click", "typer", "yaml", "pydantic")


def function_prompts(count: int, head_lines: int = 6) -> list[tuple[str, str]]:
    """(name, prompt) pairs: each prompt is a function's first head_lines lines, dedented."""
    found: list[tuple[str, str, str]] = []
    for package in PACKAGES:
        root = Path(importlib.import_module(package).__file__).parent
        for path in sorted(root.rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            lines = source.splitlines()
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno >= 2 * head_lines:
                    name = f"{package}/{path.relative_to(root)}:{node.lineno}"
                    head = textwrap.dedent("\n".join(lines[node.lineno - 1 : node.lineno - 1 + head_lines]))
                    key = hashlib.sha256(name.encode()).hexdigest()
                    found.append((key, name, head + "\n"))
    found.sort()
    return [(name, prompt) for _, name, prompt in found[:count]]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--strategies", default="draft", help="comma-separated; plain decoding always runs")
    parser.add_argument("--exit-layer", type=int)
    parser.add_argument("--target", help="another target folder (default: the embedded pair)")
    parser.add_argument("--draft", help="another drafter folder (default: the embedded pair)")
    parser.add_argument("--head", help="the EAGLE head for strategy eagle (default: the tiny preset's)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    strategies = args.strategies.split(",")
    if args.target or args.draft:
        pair = specli.load(
            target=args.target or "embedded:tiny-target",
            draft=args.draft or "embedded:tiny-draft",
            device="cpu",
        )
    else:  # the tiny preset: its drafter for draft, its EAGLE-3 head (or --head) for eagle
        pair = specli.load(strategy=strategies, draft=args.head, device="cpu")
    prompts = [
        prompt_sets.BenchPrompt(name, "third-party", text) for name, text in function_prompts(args.prompts)
    ]
    settings = bench.BenchSettings(
        pair.settings(max_new_tokens=args.max_new_tokens, num_draft_tokens=args.k, exit_layer=args.exit_layer)
    )
    encoded, _ = bench.encode_prompts(pair, prompts)
    runs = bench.run_bench(pair, encoded, strategies, settings)
    env = {
        **bench.environment(pair, None, None),
        "peak_memory_bytes": bench.peak_memory_bytes(pair.target.device),
    }
    report = bench.report(runs, settings, env, None)
    for metrics in report["summary"]["overall"].values():
        print(json.dumps({key: metrics[key] for key in KEYS}))
    for error in report["errors"]:
        print(f"error: {error}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


KEYS = ("strategy", "prompts", "tokens", "rounds", "drafted", "accepted", "rejections", "acceptance_rate",
        "accept_prob", "mean_acceptance_length", "tokens_per_second", "speedup", "c", "v")  # fmt: skip


if __name__ == "__main__":
    main()
