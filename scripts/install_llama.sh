#!/usr/bin/env bash
# llama-cpp-python for specli's llama.cpp engine (the `llama` extra), built from its PyPI source with the
# kernels under which every forward that returns logits scores its rows exactly as one-token steps do,
# and prompts still prefill through llamafile's batch kernels (docs/design.md §15, "Which build"):
#
#   bash scripts/install_llama.sh        # ~10 min on 2 cores the first time; then installs the kept wheel
#
# Two lines of ggml-cpu change (the script fails in two lines if either is gone):
# - AMX off: some VMs list it but trap its instructions (a plain build dies at the first quantized matmul).
# - No REPACK buffers (specli loads without them anyway) and ggml's tiled K-quant path off at run time.
# - llamafile's sgemm on, for batches of 32 rows or more only: upstream takes every batch of 2 rows or
#   more, which rounds a verify's rows unlike one-token steps; here a verify (at most 17 rows, the probe
#   checks) takes ggml's own dot products as a step does, and a prompt's prefill the fast kernels (Gemma 3
#   270M: 241 tokens in ~400 against ~650 ms at 2 threads). (llamafile/sgemm.cpp)
# - flash attention's one-token path without its key split: upstream splits a lone query's keys over the
#   threads once 512 KV cells are live, which rounds a step unlike the same position in a verify (whose
#   rows each run whole on one thread). Here every row runs whole, so flash attention is exact and the
#   engine may turn it on where the probe finds it faster (Gemma 3 270M: 35.6 against 38.3 ms a token at
#   1 thread). (ops.cpp)
#
# The wheel is kept in $SPECLI_WHEELS (default ~/.cache/specli/wheels): later runs install it in seconds.
# Without this script, `CMAKE_ARGS="$(python -c 'from specli.models.llama_cpp.library import CMAKE_ARGS;
# print(CMAKE_ARGS)')" pip install llama-cpp-python==0.3.36` builds upstream's source without llamafile:
# exact too, with slower prefills.
set -euo pipefail
VERSION=0.3.36
SGEMM_ROWS=32
PY=${PYTHON:-python}
BUILD=2  # bump when a patch changes: the kept wheel's folder is named by it
WHEELS=${SPECLI_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/specli/wheels}/llama-cpp-python-$VERSION-specli$BUILD
NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

wheel=$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$PY" -m pip download -q "llama-cpp-python==$VERSION" --no-binary :all: --no-deps -d "$work"
  tar xzf "$work/llama_cpp_python-$VERSION.tar.gz" -C "$work"
  src=$work/llama_cpp_python-$VERSION
  sgemm=$src/vendor/llama.cpp/ggml/src/ggml-cpu/llamafile/sgemm.cpp
  if ! grep -q '^    if (n < 2)$' "$sgemm"; then
    echo "error: $sgemm no longer has the line this script changes ('if (n < 2)'); install without it:" >&2
    echo "  see the comment at the top of scripts/install_llama.sh" >&2
    exit 1
  fi
  sed -i "s|^    if (n < 2)\$|    if (n < $SGEMM_ROWS)  // specli: verifies (<= 17 rows) take the one-token kernels|" "$sgemm"
  ops=$src/vendor/llama.cpp/ggml/src/ggml-cpu/ops.cpp
  if ! grep -qF 'q->type == GGML_TYPE_F32 && nek1 >= 512;' "$ops"; then
    echo "error: $ops no longer has the line this script changes ('... nek1 >= 512;'); install without it:" >&2
    echo "  see the comment at the top of scripts/install_llama.sh" >&2
    exit 1
  fi
  sed -i "s|q->type == GGML_TYPE_F32 \&\& nek1 >= 512;\$|q->type == GGML_TYPE_F32 \&\& nek1 >= 512 \&\& false;  // specli: a step's keys in order, as a verify's|" "$ops"
  echo "building llama-cpp-python $VERSION (llamafile's sgemm from $SGEMM_ROWS rows, no key split; ~10 min on 2 cores)…"
  mkdir -p "$WHEELS"
  CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_LLAMAFILE=ON -DGGML_CPU_REPACK=OFF -DCMAKE_C_FLAGS='$NOAMX' -DCMAKE_CXX_FLAGS='$NOAMX'" \
    "$PY" -m pip wheel -q --no-deps -w "$WHEELS" "$src"
  wheel=$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl | head -1)
fi
# --force-reinstall: an upstream build of the same version may be installed already
"$PY" -m pip install -q --no-deps --force-reinstall "$wheel"
"$PY" -m pip install -q "$wheel"  # its own dependencies (numpy, jinja2, diskcache, typing-extensions)
echo "installed $(basename "$wheel") from $WHEELS"
