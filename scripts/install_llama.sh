#!/usr/bin/env bash
# llama-cpp-python for specli's llama.cpp engine (the `llama` extra), built from its PyPI source with the
# kernels under which every forward that returns logits scores its rows exactly as one-token steps do,
# and every forward runs llamafile's batch kernels (docs/design.md §15, "Which build").
#
# Nine lines of ggml-cpu change and one included file (the script fails in two lines if a changed line is
# gone), so that a forward of up to 17 tokens scores each of its rows exactly as a one-token step does,
# with the fast kernels:
#
# - specli's own tiles (scripts/llama_tiles.inc) for Q4_1 weights (SmolLM2's type), which upstream leaves
#   to ggml's dot products at every row count, so a forward of n tokens cost nearly n steps, and for Q8_0
#   weights (both real models' LM heads), whose llamafile tiles re-read the whole matrix for a remainder
#   of 1-3 tokens and ran 4 weight rows at a time, slower than one here. A job is a tile of weight rows
#   and runs every token against them while they sit in L1. AMD EPYC Zen 5, 1 thread: SmolLM2 Q4_1, 17
#   tokens 80 ms against 51; Gemma 3 270M with its Q8_0 LM head from 2 rows, 5 / 9 / 17 tokens 31 / 53 /
#   101 ms against 86 / 100 / 126 in llamafile's tiles and 46 / 72 / 135 through the dot products. Each
#   output is summed in the same order whatever the tile (for Q8_0 as ggml's dot product sums it), so a
#   batch scores each row as a lone token does.
# - llamafile's Q4_0/Q5_0/IQ4_NL tiles one weight row at a time for up to 3 tokens, as specli's Q4_1
#   tiles: 4-row tiles streamed the weights slower there (Gemma 3 270M, mostly Q5_0, Zen 5, 1 thread: a
#   token 12.5-12.8 ms before, 10.6-11.5 after). The same sums in the same order: the same bits.
# - llamafile's sgemm for every row count (llamafile/sgemm.cpp). Upstream takes it from 2 rows and leaves
#   a lone token to ggml's dot products, which round differently (F16 attention products, Q5_0 ...):
#   single tokens would need padding to 2 rows, prompts rounding apart from steps. Here steps, verifies
#   and prompts share one kernel, so a verify of 17 tokens runs the batch kernel (Gemma 3 270M: 4.3
#   one-token steps instead of 6.4) and a new prompt may reuse an earlier one's cells. Q8_0 weights (the
#   tied LM head of both real models) take sgemm from GGML_CPU_SGEMM_Q8_0_ROWS rows (read at every
#   product; unset: 17) and ggml's dot products below: which is faster for a few rows depends on the CPU
#   (AMD EPYC Zen 5, 1 thread, Gemma 3 270M: 2 rows 39 ms against 23, 17 rows 124 against 139), so the
#   engine times both per file and sets it. Both round a Q8_0 row alike (the probe checks every file).
#   Other types take sgemm from GGML_CPU_SGEMM_ROWS rows (unset: 1); 32 gives steps and verifies ggml's
#   dot products and prompts sgemm (exact too: the probe measures the rule under it), which decodes
#   faster where sgemm's single rows are slow (docs/performance.md, "On a second machine").
# - flash attention's one-token path without its key split, and its batch path without query tiles
#   (ops.cpp): upstream splits a lone query's keys over the threads once 512 KV cells are live and tiles
#   64 queries or more, both rounding unlike a step. Here every query row runs whole on one thread, so
#   flash attention is exact and the engine turns it on where the probe finds it faster (Gemma 3 270M).
# - ggml's tiled K-quant matmul (tiled/tiled.cpp) for prompts only: upstream takes it from 8 rows, which
#   rounds a verify's rows unlike a step's (Q4_K, Q6_K ...); here from 32 rows, above any verify (17),
#   so a K-quant file's prompt prefills ~20 % faster (Gemma 3 270M Q4_K_M) while its verifies stay exact.
#   Prompt rows then round unlike steps, but alike among themselves whatever the batch: a prompt's last
#   token runs as a step and a new prompt reuses only cells an earlier prompt wrote (lm.py, `_prime`). Its
#   switch is read as GGML_CPU_TILED_PREFILL (upstream's GGML_CPU_TILED_MM, which specli sets to 0 so an
#   upstream build keeps verifies exact, leaves this build's alone): GGML_CPU_TILED_PREFILL=0 turns it
#   off, GGML_CPU_TILED_ROWS=n moves its threshold (the tests take upstream's 8 with it).
#
# Built with llamafile on, REPACK off (specli loads without its buffers anyway), AMX off (some VMs list it
# but trap its instructions: a plain build dies at the first quantized matmul).
#
#   bash scripts/install_llama.sh        # ~10 min on 2 cores the first time; then installs the kept wheel
#
# The wheel is kept in $SPECLI_WHEELS (default ~/.cache/specli/wheels): later runs install it in seconds.
# Without this script, `CMAKE_ARGS="$(python -c 'from specli.models.llama_cpp.library import CMAKE_ARGS;
# print(CMAKE_ARGS)')" pip install llama-cpp-python==0.3.36` builds upstream's source without llamafile:
# exact too, with slower prefills.
set -euo pipefail
VERSION=0.3.36
PY=${PYTHON:-python}
BUILD=6  # bump when a patch changes: the kept wheel's folder is named by it
WHEELS=${SPECLI_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/specli/wheels}/llama-cpp-python-$VERSION-specli$BUILD
HERE=$(cd "$(dirname "$0")" && pwd)
NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

wheel=$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$PY" -m pip download -q "llama-cpp-python==$VERSION" --no-binary :all: --no-deps -d "$work"
  tar xzf "$work/llama_cpp_python-$VERSION.tar.gz" -C "$work"
  src=$work/llama_cpp_python-$VERSION
  cpu=$src/vendor/llama.cpp/ggml/src/ggml-cpu
  patch() {  # $1: file under ggml-cpu, $2: the line's text, $3: sed expression changing exactly that line
    cp "$cpu/$1" "$work/before"
    sed -i "$3" "$cpu/$1"
    if cmp -s "$cpu/$1" "$work/before"; then
      echo "error: ggml-cpu/$1 no longer has the line this script changes ('$2'); install without it:" >&2
      echo "  see the comment at the top of scripts/install_llama.sh" >&2
      exit 1
    fi
  }
  # sgemm from GGML_CPU_SGEMM_ROWS rows (unset: every row count), Q8_0 weights from GGML_CPU_SGEMM_Q8_0_ROWS (unset: 17)
  patch llamafile/sgemm.cpp '    if (n < 2)' \
    's|^    if (n < 2)$|    const char * q8_rows = getenv("GGML_CPU_SGEMM_Q8_0_ROWS"), * rows = getenv("GGML_CPU_SGEMM_ROWS"); if (n < (Atype == GGML_TYPE_Q8_0 ? (q8_rows ? atoi(q8_rows) : 17) : (rows ? atoi(rows) : 1)))  // specli: one kernel for every row count|'
  # flash attention: a lone query's keys in order, as a batch row's
  patch ops.cpp 'q->type == GGML_TYPE_F32 && nek1 >= 512;' \
    's|q->type == GGML_TYPE_F32 \&\& nek1 >= 512;$|q->type == GGML_TYPE_F32 \&\& nek1 >= 512 \&\& false;  // specli|'
  # flash attention: no query tiles for long batches, each row as a step's
  patch ops.cpp 'neq1 >= Q_TILE_SZ);' 's|neq1 >= Q_TILE_SZ);$|neq1 >= Q_TILE_SZ \&\& false);  // specli|'
  # the tiled K-quant matmul for prefill-sized batches only, under a switch of its own
  patch tiled/tiled.cpp '    return rows >= 8 || ggml_tiled_matmul_forced();' \
    's|^    return rows >= 8 [|][|] ggml_tiled_matmul_forced();$|    static const int least = [] { const char * e = getenv("GGML_CPU_TILED_ROWS"); return e ? atoi(e) : 32; }(); return rows >= least \|\| ggml_tiled_matmul_forced();  // specli|'
  patch tiled/tiled.cpp 'const char * env = getenv("GGML_CPU_TILED_MM");' \
    's|getenv("GGML_CPU_TILED_MM");$|getenv("GGML_CPU_TILED_PREFILL");  // specli|'
  # llamafile's Q4_0/Q5_0/IQ4_NL tiles one weight row at a time for up to 3 tokens (as specli's Q4_1 tiles)
  patch llamafile/sgemm.cpp '        mnpack(0, m, 0, n);  (in tinyBLAS_Q0_AVX)' \
    '/^class tinyBLAS_Q0_AVX {$/,/^    __m128i iq4nlt;$/ s|^        mnpack(0, m, 0, n);$|        if (n <= 3) { n == 1 ? gemm<1, 1>(0, m, 0, n) : n == 2 ? gemm<1, 2>(0, m, 0, n) : gemm<1, 3>(0, m, 0, n); return; }  // specli: row by row\n&|'
  # specli's own tiles for Q4_1 weights (upstream: ggml's dot products at every row count) and Q8_0 ones
  cp "$HERE/llama_tiles.inc" "$cpu/llamafile/specli_tiles.inc"
  patch llamafile/sgemm.cpp 'bool llamafile_sgemm(const struct ggml_compute_params * params, ...' \
    's|^bool llamafile_sgemm(const struct ggml_compute_params \* params, int64_t m, int64_t n, int64_t k,$|#include "specli_tiles.inc"  // specli\n&|'
  patch llamafile/sgemm.cpp '    case GGML_TYPE_IQ4_NL: {' \
    's|^    case GGML_TYPE_IQ4_NL: {$|    case GGML_TYPE_Q4_1: return specli_sgemm(params, m, n, k, A, lda, B, ldb, C, ldc, Atype, Btype);  // specli\n&|'
  patch llamafile/sgemm.cpp '    case GGML_TYPE_Q8_0: {' \
    's|^    case GGML_TYPE_Q8_0: {$|    case GGML_TYPE_Q8_0: if (specli_sgemm(params, m, n, k, A, lda, B, ldb, C, ldc, Atype, Btype)) return true; {  // specli|'
  echo "building llama-cpp-python $VERSION (one matmul kernel for every row count; ~10 min on 2 cores)…"
  mkdir -p "$WHEELS"
  CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_LLAMAFILE=ON -DGGML_CPU_REPACK=OFF -DCMAKE_C_FLAGS='$NOAMX' -DCMAKE_CXX_FLAGS='$NOAMX'" \
    "$PY" -m pip wheel -q --no-deps -w "$WHEELS" "$src"
  wheel=$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl | head -1)
fi
# --force-reinstall: an upstream build of the same version may be installed already
"$PY" -m pip install -q --no-deps --force-reinstall "$wheel"
"$PY" -m pip install -q "$wheel"  # its own dependencies (numpy, jinja2, diskcache, typing-extensions)
echo "installed $(basename "$wheel") from $WHEELS"
