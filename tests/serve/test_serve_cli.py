"""`specli serve`'s usage errors: one or two plain lines, exit 2, before torch or transformers is imported.

All cases run in one child process in which importing torch or transformers fails: a usage error that
only came after loading them shows as an ImportError there, not as its own message."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = """
import json, sys
sys.modules["torch"] = None  # importing it now raises ImportError
sys.modules["transformers"] = None
from typer.testing import CliRunner
from specli.cli import app
results = []
for args, env in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, ["serve", "--device", "cpu", *args], env={"SPECLI_API_KEY": None, **env})
    results.append([result.exit_code, result.stderr])
print(json.dumps(results))
"""

CASES = [
    # (arguments, environment, what the first line says)
    (["--api-key", ""], {}, "error: --api-key is empty"),
    (["--api-key", "  "], {}, "error: --api-key is empty"),
    ([], {"SPECLI_API_KEY": ""}, "error: SPECLI_API_KEY is set but empty"),
    (["--strategy", "eagel"], {}, "error: unknown strategy 'eagel'. Did you mean 'eagle'?"),
    (["-k", "0"], {}, "error: num-draft-tokens must be between 1 and"),
    (["-k", "1000"], {}, "error: num-draft-tokens must be between 1 and"),
    (["--target", "/nonexistent/model"], {}, "error: model folder '/nonexistent/model' does not exist"),
    (["--dtype", "float13"], {}, "error: unknown dtype 'float13'."),
    (["--quant", "3bit"], {}, "error: unknown quantization '3bit'."),
    (["--temperature", "-1"], {}, "error: temperature must be a number >= 0"),
    (["--strategy", "self", "--tree", "8"], {}, "error: strategy 'self' drafts chains only"),
    (["--tree-width", "0"], {}, "error: tree-width must be between 1 and 8 (got 0)."),
    (["--port", "99999"], {}, "error: invalid value for '--port'"),
    (["--compile"], {}, "error: specli serve does not compile"),
    (["--cors-origin", "localhost:3000"], {}, "error: --cors-origin 'localhost:3000' is not an origin."),
    (["--cors-origin", "http://a.example/"], {}, "error: --cors-origin 'http://a.example/' is not an"),
]  # fmt: skip


@pytest.fixture(scope="module")
def results() -> list[tuple[int, str]]:
    cases = json.dumps([[args, env] for args, env, _ in CASES])
    out = subprocess.run([sys.executable, "-c", CHILD, cases], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [tuple(r) for r in json.loads(out.stdout)]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[" ".join(c[0]) or str(c[1]) for c in CASES])
def test_usage_errors_come_before_torch_in_two_plain_lines(results, case):
    """Catches (issue 28 items 10, 20, 21): an empty API key served with no key and no warning; a usage
    error that waits for torch and transformers to load (5 s; here an ImportError instead of its
    message); a Rich box or a traceback; `--compile` answered "no such option"."""
    code, stderr = results[case]
    lines = stderr.strip().splitlines()
    assert code == 2, stderr
    assert lines[0].startswith(CASES[case][2]), stderr
    assert len(lines) <= 2 and "Traceback" not in stderr and "╭" not in stderr
