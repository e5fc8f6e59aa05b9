"""Does llama.cpp run this file on this CPU, and how do its batches round? Checked once in a child
process, so a build that crashes (an instruction the CPU lists but traps, a kernel that faults) ends the
child with a signal and the user gets one line, not a dead process. The child also measures the file's
`RowRule` (rows.py: what keeps a batch's rows bit-identical to one-token steps on this build). The
answer is kept in specli's cache per file, library, CPU, thread count and the switches ggml reads at run
time (KERNEL_SWITCHES), and so are the engine's verify timings (`read_costs`, `write_costs`: the cost
model's prior, measured by the first generation that drafts)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from specli.errors import ModelLoadError
from specli.models.llama_cpp.library import INSTALL, Q8_ROWS, library
from specli.models.llama_cpp.rows import MEASURE_VERSION, RowRule
from specli.models.paths import specli_cache_dir

TIMEOUT_S = 300
# environment variables that choose ggml's kernels (the tiled K-quant matmul's, upstream's and the
# documented build's names): a changed one may change the rule
KERNEL_SWITCHES = (
    "GGML_CPU_TILED_MM",
    "GGML_CPU_TILED_PREFILL",
    "GGML_CPU_TILED_MM_FORCE",
    "GGML_CPU_SGEMM_ROWS",  # the documented build's: sgemm from that many rows for other types than Q8_0
)
# the Q8_0 switch (library.Q8_ROWS) the rule is measured under unless the user set it: every Q8_0 batch
# through sgemm, a step through the dot products. Both must round a Q8_0 row alike for a rule of one row
# (the engine then picks the faster kernel per row count, `LlamaLM.verify_costs`)
PROBE_Q8_ROWS = "2"
# the child: load the file as the engine does, decode, and measure the row rule (printed as JSON)
_CHILD = """
import json, sys
from specli.models.llama_cpp.library import library
from specli.models.llama_cpp.lm import BATCH, SEQUENCES, model_params
from specli.models.llama_cpp.rows import measure
L = library().llama
model = L.llama_model_load_from_file(sys.argv[1].encode(), model_params(L))
assert model, "llama.cpp cannot load the file"
rule = measure(L, model, int(sys.argv[2]), BATCH, SEQUENCES)
print("ok " + json.dumps(rule.to_json()))
"""


def _key(path: Path) -> str:
    import llama_cpp

    package = Path(llama_cpp.__file__).parent
    libs = sorted(str((p, p.stat().st_size, p.stat().st_mtime_ns)) for p in package.rglob("*.so*"))
    stat = path.stat()
    cpu = _cpu_flags()
    switches = [os.environ.get(name) for name in KERNEL_SWITCHES] + [library().user_q8_rows]
    facts = [str(path.resolve()), stat.st_size, stat.st_mtime_ns, libs, cpu, switches, MEASURE_VERSION]
    text = json.dumps(facts)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def check_runs(path: Path, name: str, threads: int) -> RowRule:
    """The file's row rule at `threads` threads; ModelLoadError (one line and what to try) when
    llama.cpp crashes or fails on `path` here."""
    folder = specli_cache_dir() / "llama-probe"
    mark = folder / f"{_key(path)}-t{threads}.json"
    if mark.is_file():
        try:
            return RowRule.from_json(json.loads(mark.read_text())["rule"])
        except (ValueError, KeyError, TypeError):
            mark.unlink(missing_ok=True)  # an older or damaged mark: measure again
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), str(threads)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env={**os.environ, Q8_ROWS: library().user_q8_rows or PROBE_Q8_ROWS},
        )
    except subprocess.TimeoutExpired:
        raise ModelLoadError(
            f"llama.cpp did not finish a few tokens of '{name}' in {TIMEOUT_S} s.", "Use --engine torch."
        ) from None
    last = done.stdout.strip().splitlines()[-1:] or [""]
    if done.returncode == 0 and last[0].startswith("ok "):
        rule = RowRule.from_json(json.loads(last[0][3:]))
        folder.mkdir(parents=True, exist_ok=True)
        mark.write_text(json.dumps({"file": str(path), "rule": rule.to_json()}) + "\n")
        return rule
    raise _crash(name, done.returncode, done.stderr)


def _costs_file(path: Path, threads: int, rule: RowRule) -> Path:
    tag = hashlib.sha256(json.dumps(rule.to_json(), sort_keys=True).encode()).hexdigest()[:8]
    return specli_cache_dir() / "llama-probe" / f"{_key(path)}-t{threads}-{tag}-costs.json"


def read_costs(path: Path, threads: int, rule: RowRule) -> tuple[dict[int, float], int | None] | None:
    """The verify timings kept for this file, library, CPU, switches, thread count and rule (seconds by
    tokens forwarded) and the Q8_0 switch they were timed under (`library.Q8_ROWS`; None: not chosen),
    or None."""
    try:
        kept = json.loads(_costs_file(path, threads, rule).read_text())
        if RowRule.from_json(kept["rule"]) != rule:
            return None
        q8_rows = kept.get("q8_0_rows")
        seconds = {int(n): float(seconds) for n, seconds in kept["seconds"].items()}
        return seconds, None if q8_rows is None else int(q8_rows)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_costs(
    path: Path, threads: int, rule: RowRule, seconds: dict[int, float], q8_rows: int | None = None
) -> None:
    """Keep `seconds` (and the Q8_0 switch chosen) for `read_costs` (a cache that cannot be written is
    skipped: measured again)."""
    file = _costs_file(path, threads, rule)
    kept = {"file": str(path), "rule": rule.to_json(), "seconds": seconds, "q8_0_rows": q8_rows}
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(kept) + "\n")
    except OSError:
        pass


def _crash(name: str, code: int, stderr: str) -> ModelLoadError:
    if code < 0:
        try:
            what = signal.Signals(-code).name
        except ValueError:
            what = f"signal {-code}"
        hint = "an instruction this CPU does not run" if what == "SIGILL" else "a crash inside llama.cpp"
        return ModelLoadError(
            f"llama.cpp crashed ({what}: {hint}) evaluating '{name}' on this machine.",
            f"Rebuild it for this CPU (pip uninstall -y llama-cpp-python; {INSTALL}), or use --engine torch.",
        )
    last = [line for line in stderr.strip().splitlines() if line.strip()]
    reason = last[-1] if last else f"exit code {code}"
    return ModelLoadError(f"llama.cpp cannot run '{name}': {reason}", "Use --engine torch.")
