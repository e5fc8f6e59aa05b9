"""llama-cpp-python's low-level bindings, imported once: the module, its backend initialised, its log
quiet (warnings and errors kept for the probe's report). No import at specli's import time."""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass, field
from typing import Any

from specli.errors import UsageError

PACKAGE = "llama-cpp-python"  # pinned to 0.3.36, the version the engine was measured on (pyproject's `llama`)
# This CPU family lists AMX but a VM may trap its instructions; llamafile's sgemm and the REPACK kernels
# score a batch differently from one-token steps (docs/performance.md). The route that needs no clone:
# upstream's source without either (exact, slower prompts and verifies); from a clone,
# scripts/install_llama.sh builds batch tiles in for every row count (exact, the documented build).
CMAKE_ARGS = (
    "-DGGML_NATIVE=ON -DGGML_LLAMAFILE=OFF -DGGML_CPU_REPACK=OFF "
    "-DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' "
    "-DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'"
)
INSTALL = f'CMAKE_ARGS="{CMAKE_ARGS}" pip install "specli-decode[llama]"'
TILED_MM = "GGML_CPU_TILED_MM"  # ggml-cpu's switch for its tiled K-quant matmul (see `library`)
# the documented build's switch, read at every matrix product: Q8_0 weights take the batch tiles
# (llamafile's sgemm entry point; specli's own Q8_0 tiles since build 6) from this many rows, ggml's dot
# products below (unset: 17). Which is faster depends on the CPU, so the engine
# times both per file (`LlamaLM.verify_costs`) and sets it, unless the user did.
Q8_ROWS = "GGML_CPU_SGEMM_Q8_0_ROWS"


@dataclass
class Library:
    """The bindings module (`llama`) and the log callback it holds (a freed one segfaults: it lives here
    as long as the process keeps this object, i.e. for good, through `library()`'s cache)."""

    llama: Any
    log: list[str] = field(default_factory=list)
    callback: Any = None
    user_q8_rows: str | None = None  # Q8_ROWS as the user set it (then the engine leaves it alone)
    q8_rows: int | None = None  # what the engine set it to last

    def set_q8_rows(self, rows: int) -> None:
        """From which row count Q8_0 products take sgemm (`Q8_ROWS`), unless the user chose it."""
        if self.user_q8_rows is None and rows != self.q8_rows:
            os.environ[Q8_ROWS] = str(rows)
            self.q8_rows = rows

    @property
    def system_info(self) -> str:
        return self.llama.llama_print_system_info().decode(errors="replace").strip()


def available() -> bool:
    """Whether llama-cpp-python can be imported (without importing it: the import loads the library)."""
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def missing_error(why: str = "") -> UsageError:
    """The one-line refusal when the bindings are not installed (exit 2)."""
    return UsageError(
        f"--engine llama.cpp needs {PACKAGE}, which is not installed{why}.",
        f"Install it: {INSTALL} (builds llama.cpp, ~4-10 min on 2 cores), or use --engine torch.",
    )


@functools.cache
def library() -> Library:
    """The bindings, imported and initialised once per process; UsageError when they are missing."""
    if not available():
        raise missing_error()
    # upstream's tiled K-quant matmul takes batches of 8 rows or more (Q4_K, Q6_K, ...) and rounds them
    # differently from the one-row path single tokens take (logits off by up to 1.6 on Gemma 3 Q4_K_M), so
    # the probe would split verifies at 7 rows: off, unless the user chose it (GGML_CPU_TILED_MM=1). The
    # documented build reads GGML_CPU_TILED_PREFILL instead and tiles batches of 32 rows or more only
    # (prompts, never a verify; scripts/install_llama.sh). ggml reads it once, at its first matrix
    # product; child processes (the probe) inherit it.
    os.environ.setdefault(TILED_MM, "0")
    try:
        import llama_cpp as llama
    except ImportError as err:  # installed without its own dependencies, or a broken build
        raise missing_error(f" or does not import ({err})") from err
    lib = Library(llama, user_q8_rows=os.environ.get(Q8_ROWS))

    def keep(level: int, text: bytes, _data: Any) -> None:
        if level in (3, 4):  # ggml's WARN and ERROR; debug, info and continuation lines are dropped
            lib.log.append(text.decode(errors="replace"))
            del lib.log[:-50]

    lib.callback = llama.llama_log_callback(keep)
    llama.llama_log_set(lib.callback, ctypes.c_void_p())
    llama.llama_backend_init()
    return lib
