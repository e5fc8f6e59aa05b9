#!/usr/bin/env bash
# Prompt lookup against its peers (docs/performance.md, "Prompt lookup against its peers"), one
# `specli bench` run per row, each interleaving its strategies prompt by prompt:
#   engine  specli --engine llama.cpp (plain, lookup) beside llama-server plain and n-gram drafting on the
#           same GGUF file: both models, 1 and 2 threads, greedy, each prompt's median of REPEATS (2; the
#           committed SmolLM2 runs: 3)
#   torch   specli --engine torch (plain, lookup at its k 32) beside transformers' generate() plain and
#           prompt lookup (k 32 and k 16 at n-gram 3, and its docs' k 10): both models, 1 and 2 threads
#           (TORCH_THREADS), greedy, each prompt's median of REPEATS (1; the committed SmolLM2 1-thread run: 3)
#   sampled the engine runs at T = 0.7, 2 threads, every run to 128 tokens (--ignore-eos: sampled texts end
#           at different lengths, and tok/s would weigh different shares of prefill), over the 27 prompts
#           of docs/data/bench-real/category-prompts.jsonl (the code and chat sets' first three of each
#           category)
#   spec    Spec-Bench's question.jsonl (../shared/data/spec_bench), the first three prompts of each of
#           its 13 categories, on the llama.cpp engine beside llama-server, 2 threads, greedy
# engine and torch run docs/data/bench-real/engine-prompts.jsonl (12 prompts of 9 categories: the code set's
# first two of each category, the chat set's first of each); 128 new tokens; PROMPTS= one file for all.
#
#   bash scripts/llama_cpp.sh build           # llama-server from source (once, ~15 min on 2 cores)
#   bash scripts/lookup_bench.sh [engine|torch|sampled|spec ...]   # all four by default, ~90 min
#   MODELS=gemma3-270m bash scripts/lookup_bench.sh engine           # one model's runs only
#   python scripts/real_tables.py             # the tables
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=docs/data/bench-real
GREEDY_PROMPTS=${PROMPTS:-$OUT/engine-prompts.jsonl}
SAMPLED_PROMPTS=${PROMPTS:-$OUT/category-prompts.jsonl}
SPEC=${SPEC_BENCH:-../shared/data/spec_bench/question.jsonl}
run() {  # $1: report name; the rest: the command
  local name=$1; shift
  "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" || echo "bench $name exited $? (see $OUT/$name.txt)" >&2
}
for part in "${@:-engine torch sampled spec}"; do
  for p in $part; do
    case $p in
      engine)
        for model in ${MODELS:-smollm2-135m gemma3-270m}; do
          for threads in 1 2; do
            THREADS=$threads run "$model-lookup-engine-t$threads" bash scripts/llama_cpp.sh bench-lookup "$model" \
              --prompts "$GREEDY_PROMPTS" --max-new-tokens 128 --repeats "${REPEATS:-2}"
          done
        done ;;
      torch)
        for model in ${MODELS:-smollm2-135m gemma3-270m}; do
          for threads in ${TORCH_THREADS:-1 2}; do
            run "$model-lookup-torch-t$threads" specli bench --preset "$model" --engine torch --strategy none \
              --strategy lookup --compare-hf --threads "$threads" --prompts "$GREEDY_PROMPTS" --max-new-tokens 128 \
              --repeats "${REPEATS:-1}"
          done
        done ;;
      sampled)
        for model in ${MODELS:-smollm2-135m gemma3-270m}; do
          THREADS=2 run "$model-lookup-engine-T0.7-t2" bash scripts/llama_cpp.sh bench-lookup "$model" \
            --prompts "$SAMPLED_PROMPTS" --max-new-tokens 128 --temperature 0.7 --seed 0 --ignore-eos
        done ;;
      spec)
        for model in ${MODELS:-smollm2-135m gemma3-270m}; do
          THREADS=2 run "$model-lookup-specbench-t2" bash scripts/llama_cpp.sh bench-lookup "$model" \
            --prompts "$SPEC" --limit 3 --max-new-tokens 128
        done ;;
      *) echo "unknown part $p (engine, torch, sampled or spec)" >&2; exit 2 ;;
    esac
  done
done
