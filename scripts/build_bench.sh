#!/usr/bin/env bash
# Which llama-cpp-python build for the llama.cpp engine (docs/performance.md, "Which llama.cpp build"):
# the documented build (scripts/install_llama.sh: llamafile's sgemm for every row count, no REPACK),
# upstream's source without sgemm (the CMAKE_ARGS route: no sgemm, no REPACK) and llama.cpp's default kernels
# (sgemm from 2 rows, REPACK built in), each exact under the row rule specli measures per file
# (specli/models/llama_cpp/rows.py). For SmolLM2-135M and Gemma 3 270M at 1 and 2 threads: one `specli
# bench` run of plain and lookup beside llama-server plain and n-gram drafting (scripts/llama_cpp.sh
# bench-lookup), 12 prompts of 9 categories, greedy, 128 tokens.
#
#   bash scripts/llama_cpp.sh build        # llama-server (once)
#   bash scripts/build_bench.sh            # ~40 min; docs/data/bench-real/builds/*.json
#   BUILDS=documented bash scripts/build_bench.sh   # one build's runs only
#   python scripts/real_tables.py          # the table
#
# The other builds go to .cache/llama-nosgemm and .cache/llama-sgemm (git-ignored) and are put first on
# PYTHONPATH for their runs only; the documented build is the one installed in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=docs/data/bench-real/builds
BUILDS=${BUILDS:-documented nosgemm sgemm}
mkdir -p "$OUT"
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
site() {  # $1: nosgemm|sgemm -> the folder its build is installed into (built on first use)
  local site=$PWD/.cache/llama-$1 kernels
  if [ "$1" = sgemm ]; then kernels="-DGGML_LLAMAFILE=ON -DGGML_CPU_REPACK=ON"; else kernels="-DGGML_LLAMAFILE=OFF -DGGML_CPU_REPACK=OFF"; fi
  if [ ! -d "$site/llama_cpp" ]; then
    CMAKE_ARGS="-DGGML_NATIVE=ON $kernels -DCMAKE_C_FLAGS='$no_amx' -DCMAKE_CXX_FLAGS='$no_amx'" \
      "$PY" -m pip install --no-deps --no-cache-dir --target "$site" "llama-cpp-python==0.3.36" >&2
  fi
  echo "$site"
}
for threads in 2 1; do
  for model in gemma3-270m smollm2-135m; do
    for build in $BUILDS; do
      if [ "$build" = documented ]; then unset PYTHONPATH; else PYTHONPATH=$(site "$build"); export PYTHONPATH; fi
      THREADS=$threads bash scripts/llama_cpp.sh bench-lookup "$model" \
        --prompts docs/data/bench-real/engine-prompts.jsonl --max-new-tokens 128 --repeats 1 \
        --json "$OUT/$model-$build-t$threads.json" > "$OUT/$model-$build-t$threads.txt" \
        || echo "bench $model $build t$threads exited $? (its errors are in the report)" >&2
    done
  done
done
