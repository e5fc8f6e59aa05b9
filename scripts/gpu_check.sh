#!/bin/sh
# CUDA checks for --compile (docs/design.md §12), on a machine with a GPU:
#   1. the gpu-marked tests (tests/models/test_gpu.py, tests/engine/test_compile.py): lossless against generate();
#   2. the embedded pair, draft and lookup, 2 prompts per category, with transformers' generate() for
#      comparison: without and with --compile;
#   3. "pure overhead": the target drafts for itself at fixed k = 4 (every draft accepted), so the rounds'
#      cost is all loop and forward overhead, which is what CUDA graphs remove: without and with --compile.
# Each bench writes OUT/NAME.json (every measurement and the environment, "compile" included) and
# OUT/NAME.txt (the table). Compiling runs take --warmup 2: the first calls of each shape compile.
# Usage: scripts/gpu_check.sh OUT_DIR        (exit status 1 when any step failed; later steps still run)
set -u
out=${1:?usage: scripts/gpu_check.sh OUT_DIR}
mkdir -p "$out"
status=0

python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__,
  "cuda", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA")' \
  | tee "$out/env.txt"

echo "== pytest -m gpu"
python -m pytest -m gpu -q > "$out/pytest-gpu.txt" 2>&1 || status=1
tail -n 15 "$out/pytest-gpu.txt"

bench() {
  name=$1
  shift
  echo "== $name: specli bench --device cuda $*"
  specli bench --device cuda --json "$out/$name.json" "$@" > "$out/$name.txt" 2>&1 || status=1
  tail -n 25 "$out/$name.txt"
}

bench pair-eager --strategy draft --strategy lookup --limit 2 --compare-hf
bench pair-compile --strategy draft --strategy lookup --limit 2 --compare-hf --compile --warmup 2
self_draft="--target embedded:tiny-target --draft embedded:tiny-target --strategy draft --fixed-k -k 4 --limit 2"
# shellcheck disable=SC2086
bench overhead-eager $self_draft
# shellcheck disable=SC2086
bench overhead-compile $self_draft --compile --warmup 2

echo "== done: $out (status $status)"
exit $status
