#!/usr/bin/env bash
# The llama.cpp engine's lookup on another machine (docs/performance.md, "On a second machine"): for
# SmolLM2-135M and Gemma 3 270M at 1 and 2 threads, `bash scripts/llama_cpp.sh bench-lookup` (specli plain
# and lookup beside llama-server plain and n-gram drafting, the same file) over the 27 prompts of
# category-prompts.jsonl, greedy, 128 tokens, three times: with Q8_0 products as the engine times and
# chooses them per file ("after"); with GGML_CPU_SGEMM_Q8_0_ROWS=2 set as a user would ("before": every
# Q8_0 batch through llamafile's sgemm, the kernels of the build before that switch); and with
# GGML_CPU_SGEMM_ROWS=32 ("rows32": every other type through ggml's dot products below 32 rows, steps and
# verifies alike, prompts through sgemm). Those three ran on the build before the Q4_1 tiles (BUILD=5 of
# scripts/install_llama.sh: `git show c6798df:scripts/install_llama.sh`); "tiles" is this build's default
# kernels (Q4_1 weights through their own tiles, a forward of up to 3 tokens row by row), the default.
#
#   bash scripts/llama_cpp.sh build      # llama-server from source (once)
#   bash scripts/machine_bench.sh        # ~20 min on 2 cores; $OUT/MODEL-KERNELS-tTHREADS.json, and v(n) by
#                                        # quantization type on this build ($OUT/llama-costs.json)
#   KERNELS="after before rows32" bash scripts/machine_bench.sh   # the build-5 runs, ~45 min
#   python scripts/real_tables.py        # the table (last)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/data/bench-real/zen5}
mkdir -p "$OUT"
for model in ${MODELS:-smollm2-135m gemma3-270m}; do
  for threads in 1 2; do
    for kernels in ${KERNELS:-tiles}; do
      unset GGML_CPU_SGEMM_Q8_0_ROWS GGML_CPU_SGEMM_ROWS
      if [ "$kernels" = before ]; then export GGML_CPU_SGEMM_Q8_0_ROWS=2; fi
      if [ "$kernels" = rows32 ]; then export GGML_CPU_SGEMM_ROWS=32; fi
      THREADS=$threads bash scripts/llama_cpp.sh bench-lookup "$model" \
        --prompts docs/data/bench-real/category-prompts.jsonl --max-new-tokens 128 --repeats 1 \
        --json "$OUT/$model-$kernels-t$threads.json" > "$OUT/$model-$kernels-t$threads.txt" \
        || echo "bench $model $kernels t$threads exited $? (its errors are in the report)" >&2
    done
  done
done
python scripts/llama_costs.py --out "$OUT/llama-costs.json" > /dev/null
