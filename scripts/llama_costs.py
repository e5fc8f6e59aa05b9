"""What a verify of n tokens costs on the llama.cpp engine, per quantization type (docs/performance.md,
"Verify cost by quantization type"): each real model's GGUF requantized with llama.cpp's own
`llama_model_quantize` (allow_requantize) to Q4_0, Q4_1, Q4_K_M, Q5_K_M, Q8_0 and F16, then
`LlamaLM.verify_costs()` (a forward of n tokens after a 64-token prefix, best of three) at 1 and 2
threads. v(n) = t(n) / t(1): where it grows nearly as n, drafting has to be nearly free and nearly always
right to pay, and the cost model turns it down.

    python scripts/llama_costs.py [--out docs/data/bench-real/llama-costs.json]   # ~5 min on 2 cores
    python scripts/llama_costs.py --table docs/data/bench-real/llama-costs.json   # the markdown table

Requantizing from a 4-bit file does not restore precision: these files are for timing only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

TYPES = {"Q4_0": 2, "Q4_1": 3, "Q4_K_M": 15, "Q5_K_M": 17, "Q8_0": 7, "F16": 1}
MODELS = ("smollm2-135m", "gemma3-270m")
LENGTHS = (2, 3, 5, 9, 17)


def measure(out: Path) -> dict:
    import torch

    from specli.models.llama_cpp.library import library
    from specli.models.llama_cpp.lm import LlamaLM, LlamaModel
    from specli.models.packaged import packaged_gguf

    llama = library().llama
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            source = packaged_gguf(name)
            for qtype, ftype in TYPES.items():
                path = Path(tmp) / f"{name}-{qtype}.gguf"
                params = llama.llama_model_quantize_default_params()
                params.ftype = ftype
                params.allow_requantize = True
                params.nthread = 2
                if llama.llama_model_quantize(str(source).encode(), str(path).encode(), params) != 0:
                    print(f"{name} {qtype}: quantize failed", file=sys.stderr)
                    continue
                model = LlamaModel(path, path.name, None)
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    lm = LlamaLM(model)
                    costs = lm.verify_costs()
                    one = costs[1]
                    row = {
                        "model": name,
                        "type": qtype,
                        "threads": threads,
                        "file_mb": round(path.stat().st_size / 2**20, 1),
                        "one_token_ms": round(one * 1000, 2),
                        "v": {str(n): round(costs[n] / one, 2) for n in LENGTHS},
                    }
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    del lm
                del model
                path.unlink()
    data = {"lengths": list(LENGTHS), "rows": rows, "system_info": library().system_info}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data


def table(data: dict) -> str:
    lengths = data["lengths"]
    head = (
        "| model | type | file MB | threads | one token ms | " + " | ".join(f"v({n})" for n in lengths) + " |"
    )
    lines = [head, "|" + "---|" * (5 + len(lengths))]
    for r in data["rows"]:
        v = " | ".join(f"{r['v'][str(n)]:.2f}" for n in lengths)
        lines.append(
            f"| {r['model']} | {r['type']} | {r['file_mb']} | {r['threads']} | {r['one_token_ms']} | {v} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("docs/data/bench-real/llama-costs.json"))
    parser.add_argument("--table", type=Path)
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    print(table(measure(args.out)))


if __name__ == "__main__":
    main()
