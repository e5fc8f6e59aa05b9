"""The commands stay short: no function in specli/cli/ is longer than MAX_LINES, counted with ast from its
first decorator to its last line (the signature, the docstring and comments included). A command parses
its options and hands typed values to the package (bench/, training/, render/); the work lives there."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import specli

CLI = Path(specli.__file__).parent / "cli"
MAX_LINES = 60


def function_lengths(source: str) -> dict[str, int]:
    """Every function and method in `source` (nested ones too) -> its length in lines, from its first
    decorator (else its `def`) to its end."""
    lengths = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lengths[f"{node.name}:{node.lineno}"] = node.end_lineno - start + 1
    return lengths


def too_long(folder: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """'file.py:name:line' -> length, for each function of the folder's modules longer than `limit`."""
    found = {}
    for path in sorted(folder.rglob("*.py")):
        for name, length in function_lengths(path.read_text(encoding="utf-8")).items():
            if length > limit:
                found[f"{path.relative_to(folder).as_posix()}:{name}"] = length
    return found


def test_no_cli_function_is_longer_than_sixty_lines():
    """Bug caught: a command growing back into one long function (`bench` was 227 lines, `train_command`
    171, `generate` 123, `explain` 110, `serve` 99) instead of handing its work to specli/bench/,
    specli/training/ or a helper of its own."""
    assert too_long(CLI) == {}


def test_the_check_sees_a_long_function(tmp_path):
    """Control: a function of 61 lines is flagged, and so is one whose decorator lines make it 61; one of
    60 lines is not, a method counts like a function, and a long module-level constant is no function."""
    body = "".join(f"    x{i} = {i}\n" for i in range(59))  # def + 59 lines + return: 61
    (tmp_path / "long.py").write_text(f"def long():\n{body}    return 0\n")
    (tmp_path / "fits.py").write_text(f"def fits():\n{body}")  # def + 59 lines: 60
    decorated = "".join(f"    y{i} = {i}\n" for i in range(57))
    (tmp_path / "decorated.py").write_text(
        f"import functools\n\n\n@functools.cache\n@functools.wraps(print)\ndef decorated():\n{decorated}"
        "    return 0\n"
    )  # 2 decorator lines + def + 57 lines + return: 61
    method = textwrap.indent(f"def method(self):\n{body}    return 0\n", "    ")
    (tmp_path / "method.py").write_text(f"class C:\n{method}")
    (tmp_path / "table.py").write_text("TABLE = [\n" + "".join(f"    {i},\n" for i in range(80)) + "]\n")
    assert too_long(tmp_path) == {
        "long.py:long:1": 61,
        "decorated.py:decorated:6": 61,
        "method.py:method:2": 61,
    }
