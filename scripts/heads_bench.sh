#!/usr/bin/env bash
# Blockwise heads against every other drafter of the embedded pair (issue 41), on a quiet machine:
#   bash scripts/heads_bench.sh [THREADS]     # reports: docs/data/bench-heads/*.json
#   bash scripts/heads_bench.sh smollm2 [THREADS]
# Run 1 holds plain, the draft model, the EAGLE-3 head and the shipped heads (embedded:tiny-heads, the
# tiny preset's heads: slot) in one bench, prompt by prompt. The EAGLE-1 head, PARD and P-EAGLE take the
# preset's draft: or head: slot, so each gets a run of its own (the tiny preset with that slot changed)
# with plain and the heads beside it again: the heads' speedup in every run shows how far runs drift.
# Run 5: trees at T = 0.7 (drawn children) against the chain in the same run.
# smollm2: SmolLM2-135M's heads (trained:smollm2-135m-heads, `bash scripts/smollm2_train.sh heads`) on
# the held-out prompts, 64 tokens: on the torch engine greedy and T = 0.7 (chain and per-round trees in
# one run), and on the llama.cpp engine (chains), each beside plain decoding on the same engine.
# Tables: python scripts/heads_tables.py
set -euo pipefail
out=docs/data/bench-heads
mkdir -p "$out"
if [ "${1:-}" = smollm2 ]; then
  threads="${2:-2}"
  real=(--preset smollm2-135m --strategy heads --prompts docs/data/bench-real/heldout.jsonl --limit 1
    --max-new-tokens 64 --threads "$threads" -k 4)
  for temperature in 0 0.7; do
    specli bench "${real[@]}" --engine torch --temperature "$temperature" --tree 16 --tree-width 4 \
      --sweep-tree 0 --json "$out/smollm2-torch-T$temperature.json"
  done
  specli bench "${real[@]}" --engine llama.cpp --json "$out/smollm2-llama.json"
  exit 0
fi
threads="${1:-2}"
presets="$(mktemp -d)"
trap 'rm -rf "$presets"' EXIT
variant() {  # NAME SLOT MODEL: the tiny preset with draft: or head: naming MODEL
  sed -e "s/^name: tiny$/name: tiny-$1/" -e "/^$2:/{n;s|model: .*|model: \"$3\"|}" presets/tiny.yaml \
    > "$presets/$1.yaml"
  echo "$presets/$1.yaml"
}
common=(--set code --threads "$threads" -k 4)
specli bench "${common[@]}" --strategy draft --strategy eagle --strategy heads --json "$out/tiny.json"
specli bench "${common[@]}" --preset "$(variant eagle1 head embedded:tiny-eagle1)" --strategy eagle \
    --strategy heads --json "$out/tiny-eagle1.json"
specli bench "${common[@]}" --preset "$(variant pard draft embedded:tiny-pard)" --strategy draft \
    --strategy heads --json "$out/tiny-pard.json"
specli bench "${common[@]}" --preset "$(variant peagle head embedded:tiny-peagle)" --strategy eagle \
    --strategy heads --json "$out/tiny-peagle.json"
specli bench "${common[@]}" --strategy heads --strategy eagle --temperature 0.7 --tree 16 --tree-width 4 \
    --sweep-tree 0 --json "$out/tiny-T0.7.json"
