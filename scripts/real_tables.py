"""The real models' tables in docs/performance.md and the README, printed as Markdown from the JSON
reports `scripts/real_bench.sh` writes (docs/data/bench-real/), so every figure there can be traced to a run.

    python scripts/real_tables.py [docs/data/bench-real]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DOCS_MODE = "prompt lookup (transformers docs: 10 tokens)"
MODELS = {"smollm2-135m": "SmolLM2-135M-Instruct", "gemma3-270m": "Gemma 3 270M"}


def _load(folder: Path, name: str) -> dict | None:
    path = folder / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _tps(row: dict | None) -> float | None:
    return row["tokens_per_second"] if row else None


def _f(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def endpoint_tps(report: dict, name: str) -> float | None:
    """Completion tokens over wall time, summed over an endpoint's counted runs (as bench's overall row)."""
    runs = [r for r in report.get("endpoint_runs", []) if r["endpoint"] == name]
    if not runs:
        return None
    return sum(r["completion_tokens"] for r in runs) / sum(r["elapsed_s"] for r in runs)


def endpoint_acceptance(report: dict, name: str) -> float | None:
    drafted = accepted = 0
    for r in report.get("endpoint_runs", []):
        if r["endpoint"] == name:
            s = r.get("speculation") or {}
            drafted += s.get("draft_tokens") or 0
            accepted += s.get("accepted_tokens") or 0
    return accepted / drafted if drafted else None


def plain_table(folder: Path) -> str:
    lines = [
        "| model | dtype | threads | specli tok/s | transformers `generate()` tok/s "
        "| specli / transformers |",
        "|---|---|---|---|---|---|",
    ]
    for model, title in MODELS.items():
        for dtype in ("float32", "bfloat16"):
            for threads in (1, 2):
                report = _load(folder, f"{model}-plain-{dtype}-t{threads}")
                if report is None:
                    continue
                ours = _tps(report["summary"]["overall"]["none"])
                theirs = _tps(report["transformers"].get("plain"))
                ratio = f"{ours / theirs:.2f}×" if ours and theirs else "–"
                lines.append(f"| {title} | {dtype} | {threads} | {_f(ours)} | {_f(theirs)} | {ratio} |")
    return "\n".join(lines)


def lookup_table(folder: Path) -> str:
    lines = [
        "| model | threads | specli plain | specli lookup (speedup; α, τ) | transformers plain | "
        "transformers prompt lookup (k 16 / its docs' 10) | llama-server plain "
        "| llama-server n-gram (acc. rate) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, title in MODELS.items():
        for threads in (1, 2):
            report = _load(folder, f"{model}-lookup-llama-t{threads}")
            if report is None:
                continue
            overall = report["summary"]["overall"]
            plain, lookup = overall["none"], overall.get("lookup")
            hf = report.get("transformers", {})
            lk = "–"
            if lookup:
                speedup = lookup["tokens_per_second"] / plain["tokens_per_second"]
                lk = f"{lookup['tokens_per_second']:.1f} ({speedup:.2f}×; "
                lk += f"{lookup['accept_prob']:.2f}, {lookup['mean_acceptance_length']:.2f})"
            acc = endpoint_acceptance(report, "llama-server ngram")
            ngram = _f(endpoint_tps(report, "llama-server ngram"))
            ngram += f" ({acc:.2f})" if acc is not None else ""
            hf_lookup = f"{_f(_tps(hf.get('prompt lookup')))} / {_f(_tps(hf.get(DOCS_MODE)))}"
            llama_plain = _f(endpoint_tps(report, "llama-server plain"))
            lines.append(
                f"| {title} | {threads} | {_f(_tps(plain))} | {lk} | {_f(_tps(hf.get('plain')))} | "
                f"{hf_lookup} | {llama_plain} | {ngram} |"
            )
    return "\n".join(lines)


def _strategy_cell(row: dict | None, plain: dict) -> str:
    """tok/s (speedup; α, τ, c, efficiency) of one strategy's overall row."""
    if not row:
        return "–"
    speedup = row["tokens_per_second"] / plain["tokens_per_second"]
    return (
        f"{row['tokens_per_second']:.1f} ({speedup:.2f}×; α {row['accept_prob']:.2f}, "
        f"τ {row['mean_acceptance_length']:.2f}, c {row['c']:.2f}, {row['efficiency']:.0%})"
    )


def drafters_table(folder: Path) -> str:
    """SmolLM2 with its trained draft model and EAGLE-3 head (scripts/real_bench.sh drafters)."""
    lines = [
        "| temperature | threads | specli plain | specli draft (speedup; α, τ, c, efficiency) | "
        "specli eagle (speedup; α, τ, c, efficiency) | transformers plain | transformers assisted, "
        "same draft model and k | specli draft / assisted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for temperature in ("0", "0.7"):
        for threads in (1, 2):
            report = _load(folder, f"smollm2-135m-drafters-T{temperature}-t{threads}")
            if report is None:
                continue
            overall, hf = report["summary"]["overall"], report.get("transformers", {})
            plain, draft = overall["none"], overall.get("draft")
            assisted = _tps(hf.get("assisted"))
            ratio = f"{draft['tokens_per_second'] / assisted:.2f}×" if draft and assisted else "–"
            lines.append(
                f"| {temperature} | {threads} | {_f(_tps(plain))} | {_strategy_cell(draft, plain)} | "
                f"{_strategy_cell(overall.get('eagle'), plain)} | {_f(_tps(hf.get('plain')))} | "
                f"{_f(assisted)} | {ratio} |"
            )
    return "\n".join(lines)


def _endpoint_cell(report: dict, name: str, plain: float | None) -> str:
    """tok/s (× plain; acceptance rate, acceptance length) of an endpoint over its counted runs."""
    tps = endpoint_tps(report, name)
    if tps is None:
        return "–"
    row = report["summary"]["overall"].get(name, {})
    rate, length = row.get("acceptance_rate"), row.get("acceptance_length")
    extra = f"; acc. rate {rate:.2f}, acc. length {length:.2f}" if rate is not None and length else ""
    return f"{tps:.1f} ({tps / plain:.2f}×{extra})" if plain else f"{tps:.1f}"


def _own_cell(row: dict | None, plain: dict) -> str:
    """tok/s (× plain; acceptance rate, acceptance length) of one of specli's rows."""
    if not row:
        return "–"
    tps = row["tokens_per_second"]
    return (
        f"{tps:.1f} ({tps / plain['tokens_per_second']:.2f}×; acc. rate {row['acceptance_rate']:.2f}, "
        f"acc. length {row['acceptance_length']:.2f})"
    )


def drafters_llama_table(folder: Path) -> str:
    """SmolLM2's drafters beside llama-server on the package's GGUF (scripts/llama_cpp.sh bench-drafters)."""
    lines = [
        "| engine | weights a target token reads | plain | draft model | n-gram | EAGLE-3 head |",
        "|---|---|---|---|---|---|",
    ]
    for threads in (1, 2):
        report = _load(folder, f"smollm2-135m-drafters-llama-t{threads}")
        if report is None:
            continue
        overall = report["summary"]["overall"]
        plain = overall["none"]
        cells = [_own_cell(overall.get(name), plain) for name in ("draft", "eagle")]
        many = "s" if threads > 1 else ""
        lines.append(
            f"| specli, float32, {threads} thread{many} | 538 MB | {_f(_tps(plain))} | {cells[0]} | – | "
            f"{cells[1]} |"
        )
        served = endpoint_tps(report, "llama-server plain")
        lines.append(
            f"| llama-server, Q4_1 target, f16 drafters, {threads} thread{many} | 98 MB | "
            f"{_f(served)} | {_endpoint_cell(report, 'llama-server draft', served)} | "
            f"{_endpoint_cell(report, 'llama-server ngram', served)} | "
            f"{_endpoint_cell(report, 'llama-server eagle3', served)} |"
        )
    return "\n".join(lines)


def _reports(folder: Path, kind: str):
    """(model title, threads, report) of every committed `MODEL-KIND-tTHREADS.json`, in table order."""
    for model, title in MODELS.items():
        for threads in (1, 2):
            report = _load(folder, f"{model}-{kind}-t{threads}")
            if report is not None:
                yield title, threads, report


def _category_tps(report: dict, endpoint: str, category: str | None) -> float | None:
    """An endpoint's completion tokens over wall time, over one category's runs (None: all)."""
    runs = [
        r
        for r in report.get("endpoint_runs", [])
        if r["endpoint"] == endpoint and (category is None or r["category"] == category)
    ]
    return sum(r["completion_tokens"] for r in runs) / sum(r["elapsed_s"] for r in runs) if runs else None


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None else f"{a / b:.2f}×"


def engine_table(folder: Path) -> str:
    """specli's llama.cpp engine beside llama-server on the same files, over all categories."""
    lines = [
        "| model | threads | specli plain | llama-server plain | plain: specli / server "
        "| specli lookup (× plain; acc. rate, τ) | llama-server n-gram (× its plain) | lookup / n-gram "
        "| specli draft (× plain) | llama-server -md | draft / -md | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for title, threads, report in _reports(folder, "engine"):
        overall = report["summary"]["overall"]
        plain, lookup, draft = overall["none"], overall.get("lookup"), overall.get("draft")
        ours = plain["tokens_per_second"]
        server = _category_tps(report, "llama-server plain", None)
        ngram = _category_tps(report, "llama-server ngram", None)
        md = _category_tps(report, "llama-server draft", None)
        lk = "–"
        if lookup:
            lk = f"{lookup['tokens_per_second']:.1f} ({lookup['tokens_per_second'] / ours:.2f}×; "
            lk += f"{lookup['acceptance_rate']:.2f}, {lookup['mean_acceptance_length']:.2f})"
        lk_tps = lookup["tokens_per_second"] if lookup else None
        dr_tps = draft["tokens_per_second"] if draft else None
        dr = f"{dr_tps:.1f} ({dr_tps / ours:.2f}×)" if dr_tps else "–"
        rss = report["environment"].get("peak_memory_bytes", 0) / 2**20
        lines.append(
            f"| {title} | {threads} | {ours:.1f} | {_f(server)} | {_ratio(ours, server)} | {lk} | "
            f"{_f(ngram)} ({_ratio(ngram, server)}) | {_ratio(lk_tps, ngram)} | {dr} | {_f(md)} | "
            f"{_ratio(dr_tps, md)} | {rss:.0f} |"
        )
    return "\n".join(lines)


def engine_category_table(folder: Path) -> str:
    """Per category: each specli strategy against the engine's own plain, and lookup against n-gram."""
    lines = [
        "| model | threads | category | specli plain tok/s | lookup × plain | draft × plain "
        "| lookup / llama-server n-gram |",
        "|---|---|---|---|---|---|---|",
    ]
    for title, threads, report in _reports(folder, "engine"):
        for category, rows in report["summary"].items():
            if category == "overall":
                continue
            plain = rows["none"]["tokens_per_second"]
            lookup = rows.get("lookup", {}).get("tokens_per_second")
            draft = rows.get("draft", {}).get("tokens_per_second")
            ngram = _category_tps(report, "llama-server ngram", category)
            lines.append(
                f"| {title} | {threads} | {category} | {plain:.1f} | {_ratio(lookup, plain)} | "
                f"{_ratio(draft, plain)} | {_ratio(lookup, ngram)} |"
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- lookup against its peers
# (scripts/lookup_bench.sh: MODEL-lookup-engine-tN, MODEL-lookup-engine-T0.7-t2, MODEL-lookup-torch-tN,
# MODEL-lookup-specbench-t2)

K16_MODE = "prompt lookup (16 tokens)"  # transformers at k 16, run where specli's k is not 16 (torch: 32)


def _lookup_k(report: dict) -> int:
    """The k specli's lookup ran at in a torch-engine report (transformers' "prompt lookup" ran at it too)."""
    return (report["settings"].get("num_draft_tokens_by_strategy") or {}).get("lookup", 16)


def _pld_modes(report: dict) -> dict[int, str]:
    """transformers' prompt-lookup modes of a torch-engine report by their k: "prompt lookup" at lookup's
    own k that run, K16_MODE at 16 where that k was not 16, DOCS_MODE at 10."""
    modes = {10: DOCS_MODE, _lookup_k(report): "prompt lookup"}
    if K16_MODE in report["transformers"]:
        modes[16] = K16_MODE
    return modes


def _pld_best(report: dict, category: str | None) -> float:
    """tokens/s of transformers' faster prompt lookup at k 16 or 10 (the issue's "its best k"), over all
    categories (None) or in one."""
    hf = report["transformers"]
    best = [hf[m] for k, m in _pld_modes(report).items() if k in (10, 16)]
    return max((r if category is None else r["by_category"][category])["tokens_per_second"] for r in best)


def _pld_same_k(report: dict, category: str | None) -> float | None:
    """tokens/s of transformers' prompt lookup at specli's own k where that is neither 16 nor 10."""
    if _lookup_k(report) in (10, 16):
        return None
    row = report["transformers"]["prompt lookup"]
    return (row if category is None else row["by_category"][category])["tokens_per_second"]


def _lookup_reports(folder: Path, kind: str):
    """(model title, label, report) of every lookup_bench.sh report of `kind`, in table order."""
    for model, title in MODELS.items():
        for label, name in (("1", "t1"), ("2", "t2"), ("2, T 0.7", "T0.7-t2")):
            report = _load(folder, f"{model}-lookup-{kind}-{name}")
            if report is not None:
                yield title, label, report


def _rate(row: dict | None) -> str:
    """acc. rate (accepted / drafted) and τ (committed tokens per round) of a summary row."""
    return "–" if not row else f"{row['acceptance_rate']:.2f}, {row['mean_acceptance_length']:.2f}"


def _categories(report: dict) -> list[str]:
    return [c for c in report["summary"] if c != "overall"]


def _lowest_category(report: dict) -> tuple[float, str]:
    """(lookup × plain, category) of the category where lookup gains least over plain decoding."""
    summary = report["summary"]
    return min(
        (summary[c]["lookup"]["tokens_per_second"] / summary[c]["none"]["tokens_per_second"], c)
        for c in _categories(report)
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def lookup_engine_table(folder: Path) -> str:
    """specli lookup on the llama.cpp engine beside llama-server's n-gram drafting, same file."""
    lines = [
        "| model | threads | specli plain | specli lookup (× plain; acc. rate, τ) | llama-server plain "
        "| llama-server n-gram (× its plain; acc. rate) | lookup / n-gram | editing: lookup / n-gram "
        "| lowest category: lookup × plain |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for title, label, report in _lookup_reports(folder, "engine"):
        overall = report["summary"]["overall"]
        plain, lookup = overall["none"]["tokens_per_second"], overall["lookup"]
        server = _category_tps(report, "llama-server plain", None)
        ngram = _category_tps(report, "llama-server ngram", None)
        acc = endpoint_acceptance(report, "llama-server ngram")
        ours = lookup["tokens_per_second"]
        edit = report["summary"].get("editing", {}).get("lookup", {}).get("tokens_per_second")
        low_ratio, lowest = _lowest_category(report)
        lines.append(
            f"| {title} | {label} | {plain:.1f} | {ours:.1f} ({ours / plain:.2f}×; {_rate(lookup)}) | "
            f"{_f(server)} | {_f(ngram)} ({_ratio(ngram, server)}; {_f(acc, 2)}) | {_ratio(ours, ngram)} | "
            f"{_ratio(edit, _category_tps(report, 'llama-server ngram', 'editing'))} | "
            f"{low_ratio:.2f}× ({lowest}) |"
        )
    return "\n".join(lines)


def lookup_torch_table(folder: Path) -> str:
    """specli lookup on the torch engine beside transformers' prompt lookup at specli's k (32) and at
    k 16 and 10 ("its best": the faster of those two), same model."""
    lines = [
        "| model | threads | specli plain | specli lookup (k; × plain; acc. rate, τ) | transformers plain "
        "| transformers prompt lookup k 32 / 16 / 10 | lookup / its best (k 16 or 10) | lookup / k 32 "
        "| editing: lookup / its best, / k 32 | mean over categories: lookup / its best "
        "| lowest category: lookup × plain |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for title, label, report in _lookup_reports(folder, "torch"):
        summary, hf = report["summary"], report["transformers"]
        plain, lookup = summary["overall"]["none"]["tokens_per_second"], summary["overall"]["lookup"]
        ours = lookup["tokens_per_second"]
        modes = _pld_modes(report)
        pld = " / ".join(_f(hf[modes[k]]["tokens_per_second"]) if k in modes else "–" for k in (32, 16, 10))
        cats = _categories(report)
        mean_ours = _mean([summary[c]["lookup"]["tokens_per_second"] for c in cats])
        mean_pld = _mean([_pld_best(report, c) for c in cats])
        lowest = min(
            cats,
            key=lambda c: summary[c]["lookup"]["tokens_per_second"] / summary[c]["none"]["tokens_per_second"],
        )
        low_ratio = (
            summary[lowest]["lookup"]["tokens_per_second"] / summary[lowest]["none"]["tokens_per_second"]
        )
        edit = summary["editing"]["lookup"]["tokens_per_second"]
        k = _lookup_k(report)
        lines.append(
            f"| {title} | {label} | {plain:.1f} | {ours:.1f} ({k}; {ours / plain:.2f}×; {_rate(lookup)}) | "
            f"{hf['plain']['tokens_per_second']:.1f} | {pld} | {_ratio(ours, _pld_best(report, None))} | "
            f"{_ratio(ours, _pld_same_k(report, None))} | "
            f"{_ratio(edit, _pld_best(report, 'editing'))}, {_ratio(edit, _pld_same_k(report, 'editing'))} | "
            f"{_ratio(mean_ours, mean_pld)} | {low_ratio:.2f}× ({lowest}) |"
        )
    return "\n".join(lines)


def lookup_category_table(folder: Path) -> str:
    """Per category and run: lookup × plain on each engine, against llama-server's n-gram (llama.cpp
    engine) and transformers' best prompt lookup (torch engine)."""
    lines = [
        "| model | threads | category | llama.cpp: lookup × plain | lookup / n-gram "
        "| torch: lookup × plain | lookup / transformers' best (k 16 or 10) | lookup / transformers k 32 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    torch_runs = {(t, lb): r for t, lb, r in _lookup_reports(folder, "torch")}
    for title, label, report in _lookup_reports(folder, "engine"):
        other = torch_runs.get((title, label))
        for c in _categories(report):
            row = report["summary"][c]
            ours = row["lookup"]["tokens_per_second"]
            cells = [_ratio(ours, row["none"]["tokens_per_second"]),
                     _ratio(ours, _category_tps(report, "llama-server ngram", c)), "–", "–", "–"]  # fmt: skip
            if other is not None and c in other["summary"]:
                t = other["summary"][c]["lookup"]["tokens_per_second"]
                cells[2:] = [_ratio(t, other["summary"][c]["none"]["tokens_per_second"]),
                             _ratio(t, _pld_best(other, c)), _ratio(t, _pld_same_k(other, c))]  # fmt: skip
            lines.append(f"| {title} | {label} | {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def specbench_table(folder: Path) -> str:
    """Spec-Bench's categories (its first prompt of each) on the llama.cpp engine, 2 threads."""
    lines = [
        "| model | category | specli plain tok/s | lookup × plain (acc. rate, τ) "
        "| lookup / llama-server n-gram |",
        "|---|---|---|---|---|",
    ]
    for model, title in MODELS.items():
        report = _load(folder, f"{model}-lookup-specbench-t2")
        if report is None:
            continue
        for c in [*_categories(report), "overall"]:
            row = report["summary"][c]
            plain, ours = row["none"]["tokens_per_second"], row["lookup"]["tokens_per_second"]
            ngram = _category_tps(report, "llama-server ngram", None if c == "overall" else c)
            lines.append(
                f"| {title} | {c} | {plain:.1f} | {ours / plain:.2f}× ({_rate(row['lookup'])}) | "
                f"{_ratio(ours, ngram)} |"
            )
    return "\n".join(lines)


BUILDS = {
    "documented": "documented (sgemm for every row count, tiled K-quant prompts, flash where faster)",
    "untiled": "stop 53's documented build (no tiled K-quant prompts)",
    "noflash": "stop 52's documented build (sgemm from 32 rows, no flash attention)",
    "nosgemm": "upstream without sgemm (CMAKE_ARGS)",
    "sgemm": "llama.cpp's default kernels",
}


def _rule(report: dict) -> str:
    """The row rule the bench's engine line names (nothing after the thread count: none needed)."""
    detail = report["environment"].get("engine_detail", "").replace("threads; ", "thread; ")
    rule = detail.rsplit("thread; ", 1)[1].rstrip(")") if "thread; " in detail else "none needed"
    return rule + (" (flash attention on)" if "flash attention" in detail else "")


def builds_table(folder: Path) -> str:
    """The llama.cpp engine on each build (scripts/build_bench.sh), beside llama-server on the same file."""
    lines = [
        "| model | threads | build | row rule | specli plain | plain: specli / server | specli lookup "
        "(× plain) | lookup / llama-server n-gram | editing: lookup / n-gram |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for threads in (1, 2):
        for model, title in MODELS.items():
            for build, name in BUILDS.items():
                report = _load(folder / "builds", f"{model}-{build}-t{threads}")
                if report is None:
                    continue
                overall = report["summary"]["overall"]
                plain, lookup = overall["none"]["tokens_per_second"], overall["lookup"]["tokens_per_second"]
                editing = report["summary"]["editing"]["lookup"]["tokens_per_second"]
                server = _category_tps(report, "llama-server plain", None)
                ngram, ngram_editing = (
                    _category_tps(report, "llama-server ngram", c) for c in (None, "editing")
                )
                lines.append(
                    f"| {title} | {threads} | {name} | {_rule(report)} | {plain:.1f} | "
                    f"{_ratio(plain, server)} | {lookup:.1f} ({lookup / plain:.2f}×) | "
                    f"{_ratio(lookup, ngram)} | {_ratio(editing, ngram_editing)} |"
                )
    return "\n".join(lines)


KERNELS = {
    "before": "build 5: sgemm for every row count, Q8_0 too",
    "after": "build 5: sgemm for every row count, Q8_0 timed per file",
    "rows32": "build 5: dot products below 32 rows (GGML_CPU_SGEMM_ROWS=32), Q8_0 timed per file",
    "tiles": "build 6: specli's Q4_1 and Q8_0 tiles, small batches row by row, Q8_0 timed per file",
}


def _kernels(report: dict, kernels: str) -> str:
    """How a report's products ran, with the Q8_0 row count the engine chose (its header names it)."""
    detail = report["environment"].get("engine_detail", "")
    if "Q8_0 through sgemm from " in detail:
        return f"{KERNELS[kernels]}: from {detail.split('sgemm from ', 1)[1].split(' ')[0]} rows"
    return KERNELS[kernels]


def machine_table(folder: Path) -> str:
    """The llama.cpp engine on a second machine (docs/data/bench-real/zen5, scripts/machine_bench.sh):
    lookup against plain and llama-server's n-gram drafting, under each kernel setting."""
    lines = [
        "| model | threads | kernels | specli plain | plain: specli / server | specli lookup (× plain) "
        "| lookup / n-gram | editing: lookup / n-gram | lowest category: lookup × plain |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for model, title in MODELS.items():
        for threads in (1, 2):
            for kernels in KERNELS:
                report = _load(folder, f"{model}-{kernels}-t{threads}")
                if report is None:
                    continue
                summary = report["summary"]
                plain = summary["overall"]["none"]["tokens_per_second"]
                lookup = summary["overall"]["lookup"]["tokens_per_second"]
                server = _category_tps(report, "llama-server plain", None)
                ngram = _category_tps(report, "llama-server ngram", None)
                editing = summary["editing"]["lookup"]["tokens_per_second"]
                low_ratio, lowest = _lowest_category(report)
                lines.append(
                    f"| {title} | {threads} | {_kernels(report, kernels)} | {plain:.1f} | "
                    f"{_ratio(plain, server)} | {lookup:.1f} ({lookup / plain:.2f}×) | "
                    f"{_ratio(lookup, ngram)} | "
                    f"{_ratio(editing, _category_tps(report, 'llama-server ngram', 'editing'))} | "
                    f"{low_ratio:.2f}× ({lowest}) |"
                )
    return "\n".join(lines)


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/data/bench-real")
    print(plain_table(folder), end="\n\n")
    print(lookup_table(folder), end="\n\n")
    print(drafters_table(folder), end="\n\n")
    print(drafters_llama_table(folder), end="\n\n")
    print(engine_table(folder), end="\n\n")
    print(engine_category_table(folder), end="\n\n")
    print(lookup_engine_table(folder), end="\n\n")
    print(lookup_torch_table(folder), end="\n\n")
    print(lookup_category_table(folder), end="\n\n")
    print(specbench_table(folder), end="\n\n")
    print(builds_table(folder), end="\n\n")
    print(machine_table(folder / "zen5"))


if __name__ == "__main__":
    main()
