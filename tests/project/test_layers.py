"""Data flows one way (docs/design.md §2): nothing outside the views (cli/, render/, serve/) imports them, and
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


# Bottom first. A room imports only rooms before it (and itself). The strategy table and the version are
# leaves every layer may read; the engine owns the seams (the drafter and target model protocols) that
# models/ and drafters/ implement, so it imports neither; the pair composes models, drafters, presets
# and settings; the views and producers (bench, training, render, serve) sit above the pair; the CLI on
# top.
LAYERS = (
    "errors",
    "text",
    "version",
    "strategies",
    "threads",
    "engine",
    "models",
    "wording",
    "presets",
    "settings",
    "drafters",
    "notes",
    "pair",
    "api",
    "readiness",
    "export",
    "bench",
    "training",
    "render",
    "serve",
    "cli",
    "__init__",
    "__main__",
)


def module_name(root: Path, path: Path) -> str:
    parts = ["specli", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the specli modules it imports (relative imports resolved; `from specli import export`
    names specli.export, not the package)."""
    paths = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                subs = {f"{base}.{a.name}" for a in node.names} & set(paths)
                found |= subs or {base}
                if len(subs) < len(node.names):
                    found.add(base)
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_arrows(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) for each import into a room above the importer's, or into a room LAYERS
    does not place."""
    order = {name: i for i, name in enumerate(LAYERS)}
    wrong = set()
    for source, targets in graph.items():
        for target in targets:
            a, b = order.get(room(source)), order.get(room(target))
            if a is None or b is None or b > a:
                wrong.add((source, target))
    return wrong


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_every_room_has_a_layer():
    """Catches a new top-level module or package that nobody placed (its imports would go unchecked)."""
    rooms = {room(m) for m in import_graph(ROOT)}
    assert rooms == set(LAYERS)


def test_imports_run_downward_only():
    """Bug caught: a drafter importing Pair again (drafters are built from a DraftContext), the memory
    planner importing a drafter module, bench importing the package's __init__ for its version."""
    assert upward_arrows(import_graph(ROOT)) == set()


def test_no_import_circles():
    """Bug caught: engine/events.py and engine/verify.py importing each other again, or a GGUF/Ollama/
    package helper importing the sources dispatcher that imports it."""
    assert circles(import_graph(ROOT)) == []


def test_the_checks_see_an_upward_arrow_and_a_circle(tmp_path):
    """Control: a model module reaching up into drafters, a lazy relative import included, and two engine
    files importing each other are found; `from specli import strategies` from models/ is not."""
    for folder in ("models", "engine", "drafters"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "strategies.py").write_text("")
    (tmp_path / "drafters" / "draft_model.py").write_text("")
    (tmp_path / "models" / "memory.py").write_text(
        "from specli import strategies\ndef f():\n    from ..drafters import draft_model\n"
    )
    (tmp_path / "engine" / "events.py").write_text("from specli.engine.verify import Verdict\n")
    (tmp_path / "engine" / "verify.py").write_text("from . import events\n")
    graph = import_graph(tmp_path)
    assert upward_arrows(graph) == {("specli.models.memory", "specli.drafters.draft_model")}
    assert circles(graph) == [["specli.engine.events", "specli.engine.verify"]]
