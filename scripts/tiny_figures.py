"""Acceptance and speed of the embedded tiny pair on code it never saw (third-party packages, not stdlib).

    python scripts/tiny_figures.py [--prompts 40] [--max-new-tokens 64] [-k 4] [--strategies none,draft]
    python scripts/tiny_figures.py --set editing --strategies none,draft,lookup,self

Default prompts: the first lines (signature, docstring, a few statements) of functions from packages
installed with specli (rich, click, typer, yaml, pydantic), picked deterministically. `--set CATEGORY`
takes that category of specli/prompts/code.jsonl instead. Greedy decoding.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import json
import textwrap
import time
from pathlib import Path

import torch

import specli

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


def set_prompts(category: str) -> list[tuple[str, str]]:
    """(id, prompt) pairs of one category of the packaged code prompt set."""
    path = Path(specli.__file__).parent / "prompts" / "code.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(str(r["question_id"]), r["turns"][0]) for r in rows if r["category"] == category]


def measure(pair, prompts, strategy: str, k: int, max_new_tokens: int, exit_layer: int | None = None) -> dict:
    drafted = accepted = rounds = tokens = 0
    elapsed = 0.0
    outputs = []
    for _, prompt in prompts:
        start = time.perf_counter()
        result = pair.generate(
            prompt,
            max_new_tokens=max_new_tokens,
            num_draft_tokens=k,
            strategy=strategy,
            exit_layer=exit_layer,
        )
        elapsed += time.perf_counter() - start
        s = result.stats
        drafted, accepted, rounds, tokens = (
            drafted + s.drafted,
            accepted + s.accepted,
            rounds + s.rounds,
            (tokens + s.tokens),
        )
        outputs.append(result.token_ids)
    return {
        "strategy": strategy,
        "prompts": len(prompts),
        "tokens": tokens,
        "rounds": rounds,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
        "mean_acceptance_length": round(tokens / rounds, 4),
        "tokens_per_second": round(tokens / elapsed, 1),
        "outputs": outputs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("-k", type=int, default=4)
    parser.add_argument("--strategies", default="none,draft")
    parser.add_argument("--set", help="a category of specli/prompts/code.jsonl instead of third-party code")
    parser.add_argument("--exit-layer", type=int)
    parser.add_argument("--target", help="another target folder (default: the embedded pair)")
    parser.add_argument("--draft", help="another drafter folder (default: the embedded pair)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.target or args.draft:
        pair = specli.load(
            target=args.target or "embedded:tiny-target",
            draft=args.draft or "embedded:tiny-draft",
            device="cpu",
        )
    else:
        pair = specli.load(device="cpu")
    prompts = set_prompts(args.set) if args.set else function_prompts(args.prompts)
    pair.generate(prompts[0][1], max_new_tokens=8)  # warm-up
    results = [
        measure(pair, prompts, s, args.k, args.max_new_tokens, args.exit_layer)
        for s in args.strategies.split(",")
    ]
    base = results[0]
    for r in results:
        r["speedup"] = round(r["tokens_per_second"] / base["tokens_per_second"], 3)
        r["identical_to_baseline"] = r["outputs"] == base["outputs"]
    for r in results:
        r.pop("outputs")
        print(json.dumps(r))
    if args.json:
        env = {"torch": torch.__version__, "threads": torch.get_num_threads(), "specli": specli.__version__}
        report = {"env": env, "k": args.k, "set": args.set or "third-party", "results": results}
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
