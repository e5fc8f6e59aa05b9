"""The README and docs/ hold together: every relative link names a file that exists, every `#anchor`
names a heading of its page as GitHub slugs it, every page under docs/ is reachable from the README, and
the README stays a front door (at most 15,000 bytes). External http(s) links are not fetched."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_LIMIT = 15_000

HEADING = re.compile(r"^(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"(`+).*?\1")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (``` or ~~~, indented ones in list items too)."""
    lines, fence = [], ""
    for line in text.splitlines():
        stripped = line.lstrip()
        if fence:
            if stripped.startswith(fence):
                fence = ""
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: markup dropped (code ticks, emphasis, link targets),
    lowercased, every character but letters, digits, '-', '_' and spaces dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a page; a repeated slug gets -1, -2 … as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose_lines(text):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> list[str]:
    """The targets of the Markdown links and images outside code (fenced blocks and inline spans)."""
    return [
        match.group(1) for line in _prose_lines(text) for match in LINK.finditer(INLINE_CODE.sub("", line))
    ]


def broken_links(page: Path) -> list[str]:
    """'page: target (why)' for each relative link of a page whose file or anchor does not exist."""
    problems = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http(s), mailto: not fetched
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            problems.append(f"{page.name}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            problems.append(f"{page.name}: {target} (no heading #{anchor} in {linked.name})")
    return problems


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_relative_link_and_anchor_resolves():
    """Catches: a link to a moved or renamed page, an anchor whose heading was renamed or moved to
    another page (the README's `#lean-drafter-steps` once pointed into the README itself)."""
    problems = [problem for page in _pages() for problem in broken_links(page)]
    assert problems == []


def test_every_docs_page_is_linked_from_the_readme():
    """Catches: a page added under docs/ that the front door never leads to."""
    readme = ROOT / "README.md"
    linked = {
        (readme.parent / target.partition("#")[0]).resolve() for target in links(readme.read_text("utf-8"))
    }
    orphans = [page.name for page in sorted((ROOT / "docs").glob("*.md")) if page.resolve() not in linked]
    assert orphans == []


def test_the_readme_is_a_front_door():
    """Catches: the README growing back past what a newcomer reads first."""
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_LIMIT, (
        f"README.md is {size:,} bytes, over {README_LIMIT:,}: move a section to docs/"
    )


def test_slugs_follow_github():
    """GitHub's slugger rules on headings like these pages' own, duplicates numbered."""
    assert slug("Static caches and `--compile`") == "static-caches-and---compile"
    assert slug("The embedded pair (`tiny`): model card") == "the-embedded-pair-tiny-model-card"
    assert slug("12. Static caches and compile") == "12-static-caches-and-compile"
    assert (
        slug("`specli presets list` / `specli presets show NAME`")
        == "specli-presets-list--specli-presets-show-name"
    )
    assert slug("Against llama.cpp") == "against-llamacpp"
    assert slug("num_draft_tokens, [α](x.md)") == "num_draft_tokens-α"
    page = "# Notes\n## Usage\n```bash\n# Usage\n```\n## Usage\n### Usage\n"
    assert anchors(page) == {"notes", "usage", "usage-1", "usage-2"}


REPO_PATH = re.compile(r"(?<![\w./-])((?:specli|tests|scripts|docs|presets)/[\w./-]*[\w/])([\w.-]*\*)?")


def missing_paths(text: str, root: Path) -> list[str]:
    """The repository paths a page names (specli/..., tests/..., scripts/..., docs/..., presets/...; a
    trailing * is a glob) that match nothing in `root`."""
    missing = []
    for match in REPO_PATH.finditer(text):
        path, glob = match.groups()
        found = any(root.glob(path + glob)) if glob else (root / path).exists()
        if not found:
            missing.append(path + (glob or ""))
    return missing


def test_every_repository_path_a_page_names_exists():
    """Catches a page naming a file that moved (design.md named specli/draft_length.py after it went to
    specli/engine/), and the checker missing one (a made-up path in a sample text)."""
    problems = [
        f"{page.name}: {path}" for page in _pages() for path in missing_paths(page.read_text("utf-8"), ROOT)
    ]
    assert problems == []
    assert missing_paths(
        "see `specli/engine/loop.py` and specli/nowhere.py, docs/data/bench-real/*,"
        " docs/data/bench-trees/tiny-* and docs/data/bench-trees/huge-*",
        ROOT,
    ) == ["specli/nowhere.py", "docs/data/bench-trees/huge-*"]


def test_the_checker_catches_a_broken_file_link_and_a_broken_anchor(tmp_path):
    """Control: the checker above is not vacuous. A missing file, an anchor that is no heading (same page
    and another page), a duplicate's number past the last copy are reported; good links, links inside
    code and external links are not."""
    (tmp_path / "other.md").write_text("# Other\n## Part `two`\n## Part `two`\n", encoding="utf-8")
    (tmp_path / "pic.svg").write_text("<svg/>", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n## Here\n"
        "[ok](other.md) [ok](other.md#part-two) [ok](other.md#part-two-1) [ok](#here) ![ok](pic.svg)\n"
        "[ext](https://example.com/missing.md#nowhere) `[code](missing.md)`\n"
        "```\n[fenced](missing.md)\n```\n"
        "[gone](missing.md) [bad](other.md#part-three) [bad](#there) [bad](other.md#part-two-2)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#part-three (no heading #part-three in other.md)",
        "page.md: #there (no heading #there in page.md)",
        "page.md: other.md#part-two-2 (no heading #part-two-2 in other.md)",
    ]


def test_the_real_model_tables_are_the_committed_reports():
    """docs/performance.md's real-model tables are what scripts/real_tables.py prints from the JSON
    reports in docs/data/bench-real/, row for row, the README's rows carry the same figures, and the SmolLM2
    drafters' card in docs/models.md is what scripts/smollm2_card.py prints from their runs' training.json
    (catches a figure edited by hand or a rerun whose reports were not committed)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("real_tables", ROOT / "scripts" / "real_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    folder = ROOT / "docs" / "data" / "bench-real"
    performance = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    printed = (tables.plain_table(folder) + "\n" + tables.lookup_table(folder)).splitlines()
    assert len(printed) == 2 + 8 + 2 + 4  # every report there: 8 plain runs, 4 lookup runs
    for row in printed:
        assert row in performance, row
    drafters = tables.drafters_table(folder).splitlines()
    assert len(drafters) == 2 + 4  # greedy and T = 0.7, at 1 and 2 threads
    llama = tables.drafters_llama_table(folder).splitlines()
    assert len(llama) == 2 + 2  # specli and llama-server, 2 threads
    for row in drafters + llama:
        assert row in performance, row
    card_spec = importlib.util.spec_from_file_location("card", ROOT / "scripts" / "smollm2_card.py")
    card = importlib.util.module_from_spec(card_spec)
    card_spec.loader.exec_module(card)
    models = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    runs = ROOT / "docs" / "data" / "training"  # the runs' training.json (the drafters are not shipped)
    for row in (card.summary_table(runs) + "\n" + card.progress_table(runs)).splitlines():
        assert row in models, row


def test_the_llama_engine_tables_are_the_committed_reports():
    """docs/performance.md's llama.cpp-engine tables (overall, per category, v(n) by quantization type)
    are what scripts/real_tables.py and scripts/llama_costs.py print from docs/data/bench-real/, every run
    there (2 models x 2 thread counts, 9 categories, 6 types), and the README's rows carry the same
    tokens/s (catches a figure edited by hand or a rerun whose reports were not committed)."""
    import importlib.util

    def script(name):
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    import json

    tables, costs = script("real_tables"), script("llama_costs")
    folder = ROOT / "docs" / "data" / "bench-real"
    performance = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    engine = tables.engine_table(folder).splitlines()
    categories = tables.engine_category_table(folder).splitlines()
    verify = costs.table(json.loads((folder / "llama-costs.json").read_text())).splitlines()
    assert (len(engine), len(categories), len(verify)) == (2 + 4, 2 + 4 * 9, 2 + 2 * 2 * 6)
    for row in engine + categories + verify:
        assert row in performance, row
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for row in engine[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        plain, server, lookup, ngram = cells[2], cells[3], cells[5].split(" ")[0], cells[6].split(" ")[0]
        draft, md = cells[8].split(" ")[0], cells[9]
        assert f" | {cells[1]} | {plain} | {server} | {lookup} | {ngram} | {draft} " in readme, row
        assert f" | {md} |" in readme, row
    for report in folder.glob("*-engine-t*.json"):  # every strategy's output was plain decoding's
        assert json.loads(report.read_text())["errors"] == [], report.name


def test_the_lookup_tables_are_the_committed_reports():
    """docs/performance.md's tables of lookup against its peers (llama.cpp engine beside llama-server's
    n-gram, torch engine beside transformers' prompt lookup, per category, Spec-Bench) are what
    scripts/real_tables.py prints from docs/data/bench-real/*-lookup-*.json, every run there, the README's
    rows carry the same figures, and every greedy run's outputs were plain decoding's."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("real_tables", ROOT / "scripts" / "real_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    folder = ROOT / "docs" / "data" / "bench-real"
    performance = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    engine = tables.lookup_engine_table(folder).splitlines()
    torch_rows = tables.lookup_torch_table(folder).splitlines()
    categories = tables.lookup_category_table(folder).splitlines()
    spec_bench = tables.specbench_table(folder).splitlines()
    # 2 models x (1, 2 threads greedy + 2 threads at T = 0.7); torch: 2 models at 1 and 2 threads
    assert (len(engine), len(torch_rows), len(categories)) == (2 + 6, 2 + 4, 2 + 6 * 9)
    assert len(spec_bench) == 2 + 2 * 14  # 13 Spec-Bench categories and overall, per model
    for row in engine + torch_rows + categories + spec_bench:
        assert row in performance, row
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for row in engine[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert f"| {cells[1]} | {cells[3].split(' (')[0]} | {cells[6]} | {cells[7]} |" in readme, row
    for report in folder.glob("*-lookup-*.json"):
        data = json.loads(report.read_text())
        if data["settings"].get("temperature", 0) == 0:
            assert data["errors"] == [], report.name


def test_the_token_tree_tables_are_the_committed_reports():
    """docs/performance.md's token-tree tables are what scripts/tree_tables.py prints from
    docs/data/bench-trees/*.json, every table complete (catches a figure edited by hand or a rerun whose
    reports were not committed)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tree_tables", ROOT / "scripts" / "tree_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    performance = set((ROOT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines())
    folder = ROOT / "docs" / "data" / "bench-trees"
    rows = 0
    for _, chain, tree, strategies in tables.TABLES:
        table = tables.pair_table(folder, chain, tree, strategies)
        assert not table.startswith("(missing"), table
        for row in table.splitlines():
            assert row in performance, row
            rows += 1
    assert rows > len(tables.TABLES) * 4


def test_a_real_model_preset_defaults_to_its_fastest_measured_strategy():
    """Each real-model preset runs by default the strategy its committed benches on the llama.cpp engine
    (docs/data/bench-real/PRESET-*engine-t*.json, every strategy against plain decoding in the same run)
    measured fastest on average over all categories, and `presets show` says why, naming those
    reports (catches a preset left on a slower strategy, or a why no report backs)."""
    import json

    from typer.testing import CliRunner

    from specli.cli import app
    from specli.presets import resolve_preset
    from specli.strategies import strategy_names

    for name in ("smollm2-135m", "gemma3-270m"):
        speedups: dict[str, list[float]] = {}
        reports = sorted((ROOT / "docs" / "data" / "bench-real").glob(f"{name}-*engine-t*.json"))
        assert reports, name
        for report in reports:
            overall = json.loads(report.read_text())["summary"]["overall"]
            plain = overall["none"]["tokens_per_second"]
            for strategy, row in overall.items():
                if strategy in strategy_names():  # not the servers' rows
                    speedups.setdefault(strategy, []).append(row["tokens_per_second"] / plain)
        mean = {strategy: sum(v) / len(v) for strategy, v in speedups.items()}
        preset = resolve_preset(name)
        assert preset.strategy == max(mean, key=mean.__getitem__), (name, mean)
        shown = CliRunner().invoke(app, ["presets", "show", name])
        assert shown.exit_code == 0, shown.output
        assert f"# why {preset.strategy}: " in shown.stdout
        for report in reports:
            assert report.stem.removeprefix(name) in preset.strategy_why.replace("\n", " "), report.name


def test_the_build_table_is_the_committed_reports():
    """docs/performance.md's table of llama.cpp builds is what scripts/real_tables.py prints from
    docs/data/bench-real/builds/ (2 models x 5 builds x 2 thread counts), and every run's outputs were
    plain decoding's: the row rule kept every build exact."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("real_tables", ROOT / "scripts" / "real_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    folder = ROOT / "docs" / "data" / "bench-real"
    rows = tables.builds_table(folder).splitlines()
    assert len(rows) == 2 + 20
    performance = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    for row in rows:
        assert row in performance, row
    reports = list((folder / "builds").glob("*.json"))
    assert len(reports) == 20
    for report in reports:
        assert json.loads(report.read_text())["errors"] == [], report.name


def test_the_second_machine_table_is_the_committed_reports():
    """docs/performance.md's table of the llama.cpp engine on a second machine is what
    scripts/real_tables.py prints from docs/data/bench-real/zen5/ (2 models x 2 thread counts x 4 kernel
    settings over two builds), and every run's outputs were plain decoding's, whichever kernels ran; and its
    v(n) table by quantization type is scripts/llama_costs.py's from zen5/llama-costs.json."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("real_tables", ROOT / "scripts" / "real_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    folder = ROOT / "docs" / "data" / "bench-real" / "zen5"
    rows = tables.machine_table(folder).splitlines()
    assert len(rows) == 2 + 16
    performance = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    for row in rows:
        assert row in performance, row
    reports = list(folder.glob("*-t[12].json"))
    assert len(reports) == 16
    for report in reports:
        assert json.loads(report.read_text())["errors"] == [], report.name
    # v(n) by quantization type on build 6 there (scripts/llama_costs.py: 2 models x 6 types x 2 threads)
    spec = importlib.util.spec_from_file_location("llama_costs", ROOT / "scripts" / "llama_costs.py")
    costs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(costs)
    verify = costs.table(json.loads((folder / "llama-costs.json").read_text())).splitlines()
    assert len(verify) == 2 + 2 * 6 * 2
    for row in verify:
        assert row in performance, row


def test_the_heads_tables_are_the_committed_reports():
    """docs/performance.md's blockwise-heads tables are what scripts/heads_tables.py prints from
    docs/data/bench-heads/*.json (catches a figure edited by hand or a rerun whose reports were not
    committed), and every greedy run was error-free."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("heads_tables", ROOT / "scripts" / "heads_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    performance = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    rows = 0
    for table in (tables.drafters_table(), tables.trees_table(), tables.smollm2_table()):
        assert not table.startswith("(missing"), table
        for row in table.splitlines():
            assert row in performance, row
            rows += 1
    assert rows > 25
    for report in sorted((ROOT / "docs" / "data" / "bench-heads").glob("*.json")):
        assert not json.loads(report.read_text())["errors"], report.name
