#!/usr/bin/env bash
# llama-cpp-python for specli's llama.cpp engine (the `llama` extra), built from its PyPI source with the
# kernels under which every forward that returns logits scores its rows exactly as one-token steps do,
# and prompts still prefill through llamafile's batch kernels (docs/design.md §15, "Which build"):
#
#   bash scripts/install_llama.sh        # ~10 min on 2 cores the first time; then installs the kept wheel
#
# - AMX off: some VMs list it but trap its instructions (a plain build dies at the first quantized matmul).
# - No REPACK buffers (specli loads without them anyway) and ggml's tiled K-quant path off at run time.
# - llamafile's sgemm on, for batches of 32 rows or more only: upstream takes every batch of 2 rows or
#   more, which rounds a verify's rows unlike one-token steps; here a verify (at most 17 rows, the probe
#   checks) takes ggml's own dot products as a step does, and a prompt's prefill the fast kernels (Gemma 3
#   270M: 241 tokens in ~400 against ~650 ms at 2 threads). One line of ggml-cpu's sgemm.cpp changes.
#
# The wheel is kept in $SPECLI_WHEELS (default ~/.cache/specli/wheels): later runs install it in seconds.
# Without this script, `CMAKE_ARGS="$(python -c 'from specli.models.llama_cpp.library import CMAKE_ARGS;
# print(CMAKE_ARGS)')" pip install llama-cpp-python==0.3.36` builds upstream's source without llamafile:
# exact too, with slower prefills.
set -euo pipefail
VERSION=0.3.36
SGEMM_ROWS=32
PY=${PYTHON:-python}
WHEELS=${SPECLI_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/specli/wheels}/llama-cpp-python-$VERSION-sgemm$SGEMM_ROWS
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
  echo "building llama-cpp-python $VERSION (llamafile's sgemm from $SGEMM_ROWS rows; ~10 min on 2 cores)…"
  mkdir -p "$WHEELS"
  CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_LLAMAFILE=ON -DGGML_CPU_REPACK=OFF -DCMAKE_C_FLAGS='$NOAMX' -DCMAKE_CXX_FLAGS='$NOAMX'" \
    "$PY" -m pip wheel -q --no-deps -w "$WHEELS" "$src"
  wheel=$(ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl | head -1)
fi
# --force-reinstall: an upstream build of the same version may be installed already
"$PY" -m pip install -q --no-deps --force-reinstall "$wheel"
"$PY" -m pip install -q "$wheel"  # its own dependencies (numpy, jinja2, diskcache, typing-extensions)
echo "installed $(basename "$wheel") from $WHEELS"
