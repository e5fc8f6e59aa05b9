"""Data flows one way (GUIDE §2): nothing outside the views (cli/, render/, serve/) imports them, and
among the views serve/ and render/ import neither each other nor cli/. Shared wording lives in
specli/wording.py, which every part may import. Read from the sources with ast (imports inside functions
included), so the check costs no model and no import."""

from __future__ import annotations

import ast
from pathlib import Path

import specli

ROOT = Path(specli.__file__).parent
VIEWS = ("cli", "render", "serve")
ENTRY_POINTS = {"__main__.py"}  # `python -m specli` runs the CLI
# Known and not yet fixed: the train command's driver draws its own Rich progress (loading spinner,
# counted stages). Listed so the rule cannot lose ground meanwhile; remove the entry once it is gone.
PENDING: set[tuple[str, str]] = set()


def imported_modules(source: str) -> list[str]:
    """Every absolute module an import statement in `source` names (`from specli import cli` names
    specli.cli)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            if node.module == "specli":
                names += [f"specli.{a.name}" for a in node.names]
    return names


def crossings(root: Path) -> set[tuple[str, str]]:
    """(file, module) for each import that breaks the rule: a non-view importing a view, or serve/ or
    render/ importing another view package."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        part = rel.split("/")[0] if "/" in rel else ""
        if rel in ENTRY_POINTS or part == "cli":
            continue
        for module in imported_modules(path.read_text(encoding="utf-8")):
            bits = module.split(".")
            if bits[0] == "specli" and len(bits) > 1 and bits[1] in VIEWS and bits[1] != part:
                found.add((rel, ".".join(bits[:3])))
    return found


def test_producers_and_the_engine_import_no_view():
    """Bug caught: bench/ or training/ importing render.words again (instead of specli.wording), or
    serve/report.py importing render.plain."""
    assert crossings(ROOT) == PENDING


def test_the_check_sees_a_crossing(tmp_path):
    """Control: an import of a view from a producer, lazy or not, and serve importing render, are found;
    a view importing wording, and cli importing render, are not."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "serve").mkdir()
    (tmp_path / "cli").mkdir()
    (tmp_path / "bench" / "run.py").write_text(
        "from specli.wording import count\ndef f():\n    from specli.render.words import count\n"
    )
    (tmp_path / "serve" / "report.py").write_text("import specli.render.plain\nfrom specli import cli\n")
    (tmp_path / "cli" / "run.py").write_text("from specli.render.progress import Counted\n")
    assert crossings(tmp_path) == {
        ("bench/run.py", "specli.render.words"),
        ("serve/report.py", "specli.render.plain"),
        ("serve/report.py", "specli.cli"),
    }
