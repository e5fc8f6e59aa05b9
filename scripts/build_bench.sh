#!/usr/bin/env bash
# Which llama-cpp-python build for the llama.cpp engine (docs/performance.md, "Which llama.cpp build"):
# the documented build (no llamafile sgemm, no REPACK) against llama.cpp's default kernels (sgemm and
# REPACK built in), each exact under the row rule specli measures per file (specli/models/llama_cpp/
# rows.py). For SmolLM2-135M and Gemma 3 270M at 1 and 2 threads: one `specli bench` run of plain and
# lookup beside llama-server plain and n-gram drafting (scripts/llama_cpp.sh bench-lookup), 12 prompts
# of 9 categories, greedy, 128 tokens.
#
#   bash scripts/llama_cpp.sh build        # llama-server (once)
#   bash scripts/build_bench.sh            # ~25 min; docs/data/bench-real/builds/*.json
#   python scripts/real_tables.py          # the table
#
# The sgemm build goes to $SGEMM_SITE (default .cache/llama-sgemm, git-ignored) and is put first on
# PYTHONPATH for its runs only; the documented build is the one installed in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
SITE=${SGEMM_SITE:-$PWD/.cache/llama-sgemm}
OUT=docs/data/bench-real/builds
mkdir -p "$OUT"
if [ ! -d "$SITE/llama_cpp" ]; then
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_LLAMAFILE=ON -DGGML_CPU_REPACK=ON -DCMAKE_C_FLAGS='$no_amx' -DCMAKE_CXX_FLAGS='$no_amx'" \
    "$PY" -m pip install --no-deps --no-cache-dir --target "$SITE" "llama-cpp-python==0.3.36"
fi
for threads in 2 1; do
  for model in gemma3-270m smollm2-135m; do
    for build in documented sgemm; do
      if [ "$build" = sgemm ]; then export PYTHONPATH=$SITE; else unset PYTHONPATH; fi
      THREADS=$threads bash scripts/llama_cpp.sh bench-lookup "$model" \
        --prompts docs/data/bench-real/engine-prompts.jsonl --max-new-tokens 128 --repeats 1 \
        --json "$OUT/$model-$build-t$threads.json" > "$OUT/$model-$build-t$threads.txt" \
        || echo "bench $model $build t$threads exited $? (its errors are in the report)" >&2
    done
  done
done
