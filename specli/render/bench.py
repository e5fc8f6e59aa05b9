"""Tables for `specli bench`: per category and overall, per strategy; with servers (--endpoint), a table
per category that puts every row side by side in the serving metrics they share (latency, speculation as
`vllm bench serve` names it). Consumes the bench report only."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from specli.wording import count

NOT_REPORTED = "not reported by this server"  # specli.bench.endpoint.NOT_REPORTED (that module needs httpx)

BARS = " ▁▂▃▄▅▆▇█"


def position_bars(rates: list[float]) -> Text:
    """Per-position acceptance as one bar character per draft position (full block = 100%)."""
    text = Text()
    for rate in rates:
        text.append(BARS[min(len(BARS) - 1, round(rate * (len(BARS) - 1)))], style="#56B4E9")
    return text


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _split(m: dict[str, Any]) -> str:
    total = m["elapsed_s"] or 1.0
    return "/".join(
        f"{100 * m.get(key, 0.0) / total:.0f}"
        for key in ("draft_time_s", "verify_time_s", "prefill_time_s", "other_time_s")
    )


def is_endpoint(metrics: dict[str, Any]) -> bool:
    """A server's row (bench --endpoint), not a local strategy's."""
    return metrics.get("kind") == "endpoint"


def _ms_cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _speculation_cells(m: dict[str, Any]) -> list[str]:
    """acc. rate, acc. length, drafts, draft tokens, accepted, per position (%): '–' for a figure not
    known, and "not reported by this server" across a server's row that reported nothing."""
    if is_endpoint(m) and m.get("speculation") == NOT_REPORTED:
        return [NOT_REPORTED, "", "", "", "", ""]
    rates = m.get("per_position_acceptance_rate")
    return [
        _num(m.get("acceptance_rate") if m.get("draft_tokens") else None, ".2f"),
        _num(m.get("acceptance_length"), ".2f"),
        _count(m.get("drafts")),
        _count(m.get("draft_tokens")),
        _count(m.get("accepted_tokens")),
        " ".join(f"{100 * r:.0f}" for r in rates) if rates else "–",
    ]


def _count(value: int | None) -> str:
    return "–" if value is None else str(value)


def serving_table(category: str, metrics: dict[str, dict[str, Any]], title: str) -> Table:
    """Every row of a category, local and served, in the figures they share: speed, latency, and
    speculation as the servers count it."""
    table = Table(title=title, title_justify="left", header_style="bold")
    for name, justify in (
        ("name", "left"), ("tok/s", "right"), ("TTFT ms", "right"), ("TPOT ms", "right"), ("ITL ms", "right"),
        ("acc. rate", "right"), ("acc. length", "right"), ("drafts", "right"), ("draft tokens", "right"),
        ("accepted", "right"), ("per position %", "left"),
    ):  # fmt: skip
        table.add_column(name, justify=justify)
    for name, m in metrics.items():
        table.add_row(
            name,
            f"{m['tokens_per_second']:.1f}",
            _ms_cell(m.get("mean_ttft_ms")),
            _ms_cell(m.get("mean_tpot_ms")),
            _ms_cell(m.get("mean_itl_ms")),
            *_speculation_cells(m),
        )
    return table


def has_trees(metrics: dict[str, dict[str, Any]]) -> bool:
    """Whether any local row drafted token trees (its `tree` > 0; a report older than trees has none)."""
    return any(m.get("tree") for m in metrics.values() if not is_endpoint(m))


def category_table(category: str, metrics: dict[str, dict[str, Any]], trees: bool = False) -> Table:
    """One category's local rows; `trees`: with a "nodes/round" column (draft tokens verified per round
    that drafted: a tree's nodes, a chain's k), shown when any row of the report is a tree."""
    table = Table(title=f"{category}", title_justify="left", header_style="bold")
    for name, justify in (
        ("strategy", "left"), ("tok/s", "right"), ("speedup", "right"), ("mean k", "right"),
        *((("nodes/round", "right"),) if trees else ()),
        ("acc. rate", "right"),
        ("α", "right"), ("τ", "right"),
        ("per position", "left"), ("draft/verify/prefill/other %", "right"), ("c", "right"), ("v", "right"),
        ("bound", "right"), ("efficiency", "right"),
    ):  # fmt: skip
        table.add_column(name, justify=justify)
    for strategy, m in metrics.items():
        nodes = [_num(m.get("nodes_per_round") if m["drafted"] else None, ".2f")] if trees else []
        table.add_row(
            strategy,
            f"{m['tokens_per_second']:.1f}",
            _num(m["speedup"], ".2f") + ("×" if m["speedup"] is not None else ""),
            f"{m['mean_k']:.2f}" if m["drafted"] else "–",
            *nodes,
            f"{m['acceptance_rate']:.2f}" if m["drafted"] else "–",
            f"{m['accept_prob']:.2f}" if m["drafted"] else "–",
            f"{m['mean_acceptance_length']:.2f}",
            position_bars(m["per_position_acceptance"]),
            _split(m),
            _num(m["c"], ".2f"),
            _num(m["v"], ".2f"),
            _num(m["bound"], ".2f"),
            _num(m["efficiency"], ".0%"),
        )
    return table


def judged_by_position(runs: list[dict[str, Any]], strategy: str, k: int) -> list[int] | None:
    """How many rounds judged each draft position, over the report's runs of `strategy` at k (None when
    the runs do not say: a report older than the counts)."""
    mine = [r for r in runs if r["strategy"] == strategy and r["num_draft_tokens"] == k]
    if not mine or any("position_judged" not in r for r in mine):
        return None
    rows = [r["position_judged"] for r in mine]
    width = max(len(row) for row in rows)
    return [sum(row[i] for row in rows if i < len(row)) for i in range(width)]


def _by_position(rates: list[float], judged: list[int] | None) -> str:
    """α per draft position, "–" where no round judged the position (a rate of nothing, not 0); every
    rate is shown when the judged counts are unknown."""
    if judged is None:
        return " ".join(f"{a:.2f}" for a in rates)
    return " ".join(f"{a:.2f}" if i < len(judged) and judged[i] else "–" for i, a in enumerate(rates))


def sweep_table(strategy: str, rows: list[dict[str, Any]], runs: list[dict[str, Any]] | None = None) -> Table:
    """One strategy across k: speed, what a round's drafting costs as k grows, and acceptance by depth.
    runs: the report's runs, which say which draft positions were ever judged."""
    table = Table(title=f"{strategy} across k", title_justify="left", header_style="bold")
    for name, justify in (
        ("k", "right"), ("tok/s", "right"), ("speedup", "right"), ("draft ms/round", "right"),
        ("× k=" + str(rows[0]["k"]), "right"), ("verify ms/round", "right"), ("τ", "right"),
        ("α", "right"), ("α by position", "left"),
    ):  # fmt: skip
        table.add_column(name, justify=justify)
    best = max(rows, key=lambda row: row["tokens_per_second"])
    for row in rows:
        style = "bold" if row is best else ""
        table.add_row(
            str(row["k"]),
            f"{row['tokens_per_second']:.1f}",
            _num(row["speedup"], ".2f") + ("×" if row["speedup"] is not None else ""),
            f"{row['draft_ms_per_round']:.2f}",
            f"{row['draft_cost_vs_first']:.2f}×",
            f"{row['verify_ms_per_round']:.2f}",
            f"{row['mean_acceptance_length']:.2f}",
            f"{row['accept_prob']:.2f}",
            _by_position(
                row["per_position_accept_prob"],
                judged_by_position(runs, strategy, row["k"]) if runs is not None else None,
            ),
            style=style,
        )
    return table


def transformers_table(hf: dict[str, Any], specli_best: dict[str, float]) -> Table:
    table = Table(
        title="transformers generate() on the same prompts", title_justify="left", header_style="bold"
    )
    table.add_column("mode")
    table.add_column("tok/s", justify="right")
    table.add_column("specli / transformers", justify="right")
    matching = {
        "plain": "none",
        "assisted": "draft",
        "prompt lookup": "lookup",
        "early exit": "self",
    }  # by the mode's name before any " (...)": "assisted (transformers defaults)" is assisted too
    for mode, m in hf.items():
        if "error" in m:
            table.add_row(mode, "error", m["error"])
            continue
        strategy = matching.get(mode.split(" (")[0], "")
        ours = specli_best.get(strategy)
        ratio = f"{ours / m['tokens_per_second']:.2f}× ({strategy})" if ours else "–"
        table.add_row(mode, f"{m['tokens_per_second']:.1f}", ratio)
    return table


def draft_length_words(settings: dict[str, Any]) -> str:
    """How the runs chose k: "k=2,3,4 (sweep, fixed in each run)", "fixed k=4", or "k ≤ 4, chosen per
    round" (a report without fixed_k: "k=4"), then a strategy that ran at its own k: " (lookup: 16)"."""
    ks, k = settings.get("sweep_k") or [], settings["num_draft_tokens"]
    if ks:
        return f"k={','.join(str(k) for k in ks)} (sweep, fixed in each run)"
    if "fixed_k" not in settings:
        return f"k={k}"
    words = f"fixed k={k}" if settings["fixed_k"] else f"k ≤ {k}, chosen per round"
    own = settings.get("num_draft_tokens_by_strategy") or {}
    return words + "".join(f" ({name}: {k_own})" for name, k_own in own.items()) + tree_words(settings)


def tree_words(settings: dict[str, Any]) -> str:
    """How the runs drafted trees: " · trees of ≤ 16 nodes, width 2" (--tree), " · tree sweep 4,8 nodes
    (depth k, every node each round)" (--sweep-tree); "" for chains (and reports older than trees)."""
    words = ""
    if settings.get("tree"):
        words += f" · trees of ≤ {settings['tree']} nodes, width {settings.get('tree_width')}"
    if settings.get("sweep_tree"):
        sizes = ",".join(str(n) for n in settings["sweep_tree"])
        words += f" · tree sweep {sizes} nodes (depth k, every node each round)"
    return words


def compiled_rows(metrics: dict[str, dict[str, Any]]) -> list[str]:
    """Rows (with their count) whose timed runs compiled something, e.g. "eagle (3 runs)"."""
    return [
        f"{name} ({count(m['compiled_runs'], 'run')})"
        for name, m in metrics.items()
        if m.get("compiled_runs")
    ]


def local_footer(
    s: dict[str, Any], env: dict[str, Any], overall: dict[str, dict[str, Any]] | None = None
) -> str:
    """The settings and machine of the local runs, and what the local table's columns mean (`overall`:
    the summary's rows, which say whether the tables show nodes/round)."""
    overall = overall or {}
    sampling = f"top_k={s.get('top_k')} · top_p={s.get('top_p')} · " if s["temperature"] else ""
    engine = f"{env['engine']} " if env.get("engine", "torch") != "torch" else ""  # torch: as before
    return (
        draft_length_words(s) + f" · max_new_tokens={s['max_new_tokens']} · "
        f"temperature={s['temperature']} · {sampling}"
        f"repeats={s['repeats']} (median) · warm-up={s['warmup']} · {env['device']} {engine}{env['dtype']} "
        f"quant={env['quantization']} · threads={env['threads']} · peak memory "
        f"{env.get('peak_memory_bytes', 0) / 2**20:.0f} MiB"
        + "".join(f" · {name} steps: {how}" for name, how in env.get("drafter_steps", {}).items())
        + "\n"
        "draft/verify/prefill/other: shares of the time (prefill: the prompt's forward; other: the "
        "loop around the forwards) · mean k = drafted per round · acc. rate = accepted/drafted · "
        "α = accepted/(accepted + rejections), the probability that a "
        "judged draft is kept · τ mean acceptance length (tokens per round) · c draft cost per token "
        "and v verify cost per round, in plain target steps · bound E(α,k)/(k·c+v) with "
        "E = (1 − α^(k+1))/(1 − α) at each round's own drafted k (mean E over mean k·c+v) · "
        "efficiency = speedup / bound"
        + (
            " · nodes/round: draft tokens verified per round (a tree's nodes); a tree's per position is per "
            "depth"
            if has_trees(overall)
            else ""
        )
        + (
            " · across k: draft ms/round and its ratio to the smallest k (a parallel drafter's barely "
            "grows), α by position = P(draft i kept | drafts before it kept); bold: the fastest k"
            if s.get("sweep_k")
            else ""
        )
    )


def served_footer(report: dict[str, Any], local: bool, told: Collection[str] = ()) -> str:
    """The servers' settings (when no local run states them), each endpoint (one whose error is in
    `told`, printed as it happened, as failed with no row), and what the side-by-side columns mean."""
    s = report["settings"]
    lines = []
    if not local:
        sampling = f" · seed={s['seed']} + repeat" if s["temperature"] else ""
        lines.append(
            f"max_new_tokens={s['max_new_tokens']} · temperature={s['temperature']}{sampling} · "
            f"repeats={s['repeats']} (median) · warm-up={s['warmup']} · prompts sent as text"
        )
    overall = report["summary"].get("overall", {})
    for label, e in report.get("endpoints", {}).items():
        if e.get("error"):
            if e["error"] in told:  # not repeated: the line above says why
                lines.append(f"{label}: {e['url']} · failed, no row (its error is above)")
            continue
        speculation = overall.get(label, {}).get("speculation", NOT_REPORTED)
        source = "speculation " + (speculation if speculation == NOT_REPORTED else f"from {speculation}")
        at = f" · {e['concurrency']} requests at a time" if e.get("concurrency", 1) > 1 else ""
        lines.append(f"{label}: {e['url']} · model {e['model']} · {source}{at}")
    lines.append(
        "TTFT: time to the first token · TPOT: time per token after the first · ITL: time between "
        "streamed chunks (a round's tokens arrive together) · acc. rate = accepted / draft tokens · "
        "acc. length = 1 + accepted / drafts · drafts: rounds that drafted · per position: accepted at "
        "draft position i / drafts · names as vllm bench serve prints them"
    )
    return "\n".join(lines)


def bench_view(report: dict[str, Any], told: Collection[str] = ()) -> Group:
    """All tables: each category's local rows, overall last, then (with servers) every row side by side
    per category, then transformers and any errors (identity, unreachable servers) but those in `told`
    (already printed when they happened: each error is printed once)."""
    parts: list[Any] = []
    summary = report["summary"]
    served = any(is_endpoint(m) for per in summary.values() for m in per.values())
    local = any(not is_endpoint(m) for per in summary.values() for m in per.values())
    trees = has_trees(summary.get("overall", {}))
    for category, metrics in summary.items():
        mine = {name: m for name, m in metrics.items() if not is_endpoint(m)}
        if mine:
            parts.append(category_table(category, mine, trees))
    for strategy, rows in (report.get("sweep") or {}).items():
        parts.append(sweep_table(strategy, rows, report.get("runs")))
    if local:
        parts.append(
            Text(local_footer(report["settings"], report["environment"], summary.get("overall")), style="dim")
        )
    if served:
        for category, metrics in summary.items():
            parts.append(serving_table(category, metrics, f"{category}: side by side" if local else category))
    if served or report.get("endpoints"):
        parts.append(Text(served_footer(report, local, told), style="dim"))
    if report.get("transformers"):
        best: dict[str, float] = {}  # each strategy's fastest variant (its best k in a sweep)
        for m in summary.get("overall", {}).values():
            if not is_endpoint(m):
                best[m["strategy"]] = max(best.get(m["strategy"], 0.0), m["tokens_per_second"])
        parts.append(transformers_table(report["transformers"], best))
    compiled = compiled_rows(summary.get("overall", {}))
    if compiled:
        parts.append(
            Text(
                "no efficiency for "
                + ", ".join(compiled)
                + ": torch.compile built graphs during timed runs, so their time is not the steady state's",
                style="yellow",
            )
        )
    for error in report.get("errors", []):
        if error not in told:
            parts.append(Text(f"error: {error}", style="bold red"))
    return Group(*parts)
