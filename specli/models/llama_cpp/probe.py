"""Does llama.cpp run this file on this CPU? Checked once in a child process, so a build that crashes
(an instruction the CPU lists but traps, a kernel that faults) ends the child with a signal and the user
gets one line, not a dead process. The answer is kept in specli's cache per file, library and CPU."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

from specli.errors import ModelLoadError
from specli.models.paths import specli_cache_dir

TIMEOUT_S = 300
# the child: load the file, decode two tokens one at a time and then as a batch of two
_CHILD = """
import ctypes, sys
import llama_cpp as L
quiet = L.llama_log_callback(lambda *a: None)  # kept referenced: a freed callback segfaults
L.llama_log_set(quiet, ctypes.c_void_p())
L.llama_backend_init()
model = L.llama_model_load_from_file(sys.argv[1].encode(), L.llama_model_default_params())
assert model, "llama.cpp cannot load the file"
params = L.llama_context_default_params()
params.n_ctx, params.n_batch, params.n_ubatch = 64, 64, 64
ctx = L.llama_init_from_model(model, params)
assert ctx, "llama.cpp cannot open a context"
batch = L.llama_batch_init(8, 0, 1)
for step, tokens in enumerate(([1], [2, 3])):
    for i, t in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, step + i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, True
    batch.n_tokens = len(tokens)
    assert L.llama_decode(ctx, batch) == 0, "llama_decode failed"
print("ok")
"""


def _key(path: Path) -> str:
    import llama_cpp

    library = Path(llama_cpp.__file__).parent
    libs = sorted(str((p, p.stat().st_size, p.stat().st_mtime_ns)) for p in library.rglob("*.so*"))
    stat = path.stat()
    cpu = _cpu_flags()
    text = json.dumps([str(path.resolve()), stat.st_size, stat.st_mtime_ns, libs, cpu])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return ""


def check_runs(path: Path, name: str) -> None:
    """ModelLoadError (one line and what to try) when llama.cpp crashes or fails on `path` here."""
    folder = specli_cache_dir() / "llama-probe"
    mark = folder / f"{_key(path)}.ok"
    if mark.is_file():
        return
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise ModelLoadError(
            f"llama.cpp did not finish two tokens of '{name}' in {TIMEOUT_S} s.", "Use --engine torch."
        ) from None
    if done.returncode == 0 and done.stdout.strip().endswith("ok"):
        folder.mkdir(parents=True, exist_ok=True)
        mark.write_text(json.dumps({"file": str(path)}) + "\n")
        return
    raise _crash(name, done.returncode, done.stderr)


def _crash(name: str, code: int, stderr: str) -> ModelLoadError:
    from specli.models.llama_cpp.library import INSTALL

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
