#!/usr/bin/env bash
# The llama.cpp engine measured (docs/performance.md, "The llama.cpp engine"): for SmolLM2-135M (Q4_1)
# and Gemma 3 270M (Q4_K_M), at 1 and 2 threads, one `specli bench` run each: specli --engine llama.cpp
# (plain, lookup; SmolLM2 also its trained draft model as a GGUF) beside llama-server on the same files
# (plain, n-gram, -md the same drafter file), over 27 prompts of 9 categories (the code and chat sets'
# first three of each category: docs/data/bench-real/category-prompts.jsonl; one prompt a category
# measured a prompt, not a category), greedy, 128 tokens. Then the verify cost by quantization type
# (scripts/llama_costs.py).
#
#   bash scripts/llama_cpp.sh build           # llama-server from source (once, ~15 min on 2 cores)
#   bash scripts/engine_bench.sh              # ~1 hour; docs/data/bench-real/*-engine-t*.json, llama-costs.json
#   MODELS=smollm2-135m REPEATS=2 COSTS=0 bash scripts/engine_bench.sh   # one model, each prompt's median
#                                             # of 2 runs, no v(n) table
#   python scripts/real_tables.py             # the tables
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/data/bench-real
for model in ${MODELS:-smollm2-135m gemma3-270m}; do
  for threads in 1 2; do
    THREADS=$threads bash scripts/llama_cpp.sh bench-engine "$model" --prompts "$OUT/category-prompts.jsonl" \
      --max-new-tokens 128 --repeats "${REPEATS:-1}" --json "$OUT/$model-engine-t$threads.json" \
      > "$OUT/$model-engine-t$threads.txt" || echo "bench $model t$threads exited $? (its errors are in the report)" >&2
  done
done
if [ "${COSTS:-1}" = 1 ]; then
  python scripts/llama_costs.py --out "$OUT/llama-costs.json"
fi
