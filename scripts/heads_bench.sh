#!/usr/bin/env bash
# Blockwise heads against every other drafter of the embedded pair (issue 41), on a quiet machine:
#   bash scripts/heads_bench.sh [THREADS]     # reports: docs/data/bench-heads/*.json
# Run 1 holds plain, the draft model, the EAGLE-3 head and the shipped heads (embedded:tiny-heads, the
# tiny preset's heads: slot) in one bench, prompt by prompt. The EAGLE-1 head, PARD and P-EAGLE take the
# preset's draft: or head: slot, so each gets a run of its own (the tiny preset with that slot changed)
# with plain and the heads beside it again: the heads' speedup in every run shows how far runs drift.
# Run 5: trees at T = 0.7 (drawn children) against the chain in the same run.
# Tables: python scripts/heads_tables.py
set -euo pipefail
threads="${1:-2}"
out=docs/data/bench-heads
mkdir -p "$out"
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
