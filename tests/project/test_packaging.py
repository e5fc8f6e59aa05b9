"""The distribution's name and every install hint: `specli` on the registry is someone else's package
(0.3.1, "Generate Typer CLI commands from OpenAPI specs"), so no hint may send a user there."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
# `pip install specli`, `pip install 'specli[serve]'`, `pip install "specli>=0.1"`: the registry's specli
REGISTRY_SPECLI = re.compile(r"""pip install (-U |--upgrade )?['"]?specli(\[|['"\s>=<]|$)""", re.MULTILINE)


def _texts() -> list[tuple[Path, str]]:
    files = [
        *sorted((ROOT / "specli").rglob("*.py")),
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    return [(path, path.read_text(encoding="utf-8")) for path in files]


def test_the_distribution_is_not_named_like_the_registrys_unrelated_specli():
    """Catches: renaming the distribution back to `specli` (a fresh venv's `pip install specli` then
    installs the unrelated package); the test extra naming the old distribution."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == "specli-decode"
    assert project["scripts"]["specli"] == "specli.cli:main"
    assert all(not dep.startswith("specli[") for dep in project["optional-dependencies"]["test"])
    assert "specli-decode[serve]" in project["optional-dependencies"]["test"]


def test_no_install_hint_names_the_registrys_specli():
    """Catches: a hint like `pip install 'specli[serve]'` in an error message or the docs."""
    offenders = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path, text in _texts()
        for match in REGISTRY_SPECLI.finditer(text)
    ]
    assert offenders == []


def test_the_pattern_sees_a_registry_hint():
    """Control: the pattern above does match the hints that used to ship."""
    for hint in ("pip install 'specli[serve]'", 'pip install "specli[serve]"', "pip install specli\n"):
        assert REGISTRY_SPECLI.search(hint), hint
    assert not REGISTRY_SPECLI.search("pip install -e '.[serve]'")
    assert not REGISTRY_SPECLI.search("pip install 'specli-decode[serve]'")


def test_the_docs_name_every_strategy_and_every_shipped_preset():
    """Catches: a strategy added without its row in the options table (docs/commands.md; generate's
    table once listed --strategy without eagle), a shipped preset missing from the preset table
    (docs/models.md, Bring your own GPU)."""
    from specli.settings import STRATEGIES

    commands = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    row = next(line for line in commands.splitlines() if line.startswith("| `--strategy "))
    named = row.split("`")[1].removeprefix("--strategy ").replace("\\|", "|").split("|")
    assert sorted(named) == sorted(STRATEGIES)
    models = (ROOT / "docs" / "models.md").read_text(encoding="utf-8")
    table = models.partition("## Bring your own GPU")[2]
    presets = sorted(path.stem for path in (ROOT / "presets").glob("*.yaml"))
    missing = [name for name in presets if f"| `{name}` |" not in table]
    assert presets and missing == []
