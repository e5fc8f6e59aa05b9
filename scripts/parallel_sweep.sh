#!/bin/sh
# The parallel-drafting figures of docs/performance.md: each drafter of the embedded pair at k = 2..8 (every
# round drafts exactly k), autoregressive against parallel at the same size. ~12 min on 2 CPU cores
# (THREADS=1 sh scripts/parallel_sweep.sh: one thread, ~20 min).
set -e
out=${1:-docs/sweep}
threads=${THREADS:-2}
mkdir -p "$out"
specli bench --strategy draft --sweep-k 2-8 --threads "$threads" --json "$out/draft.json" > "$out/draft.txt"
specli bench --strategy draft --draft embedded:tiny-pard --sweep-k 2-8 --threads "$threads" --json "$out/pard.json" > "$out/pard.txt"
specli bench --strategy eagle --sweep-k 2-8 --threads "$threads" --json "$out/eagle3.json" > "$out/eagle3.txt"
specli bench --strategy eagle --draft embedded:tiny-peagle --sweep-k 2-8 --threads "$threads" --json "$out/peagle.json" > "$out/peagle.txt"
