#!/usr/bin/env bash
# llama.cpp's llama-server beside specli, on the embedded pair (docs/performance.md: "Against llama.cpp").
#
#   bash scripts/llama_cpp.sh build     # llama-server from source + the embedded pair as GGUF (~20 min, 2 cores)
#   bash scripts/llama_cpp.sh serve     # llama-server on 127.0.0.1:8090 with the drafter (draft-simple)
#   bash scripts/llama_cpp.sh bench     # one `specli bench` run: specli's strategies beside llama-server
#                                     # plain, with its draft model and with its n-gram drafting
#   bash scripts/llama_cpp.sh bench-real smollm2-135m|gemma3-270m [specli bench options]
#                                     # a real model's preset beside llama-server plain and with n-gram
#                                     # drafting, both serving the very GGUF file the preset dequantizes
#   bash scripts/llama_cpp.sh bench-engine smollm2-135m|gemma3-270m [specli bench options]
#                                     # specli's llama.cpp engine (plain, lookup; SmolLM2: its draft model
#                                     # as a GGUF) beside llama-server plain, n-gram and -md, same files
#   bash scripts/llama_cpp.sh bench-lookup smollm2-135m|gemma3-270m [specli bench options]
#                                     # specli lookup on the llama.cpp engine beside llama-server plain
#                                     # and n-gram drafting, same file
#   bash scripts/llama_cpp.sh bench-drafters [specli bench options]
#                                     # SmolLM2 with its trained draft model and EAGLE-3 head, beside
#                                     # llama-server plain, -md (both converted to GGUF) and n-gram
#
# llama.cpp's source (tools/server, convert_hf_to_gguf.py, conversion/, gguf-py) comes vendored in the
# llama-cpp-python 0.3.36 source distribution on PyPI; cmake and g++ build it. Nothing is committed from
# it. Work happens in $LLAMA_DIR (default .cache/llama.cpp, git-ignored).
#
# The converter identifies BPE pre-tokenizers by a hash of known models and refuses the embedded
# tokenizer; it is a byte-level BPE with GPT-2's split pattern, i.e. llama.cpp's `gpt-2` pre-tokenizer,
# which scripts/gguf_convert.py answers for it (checked: the converted target tokenizes the prompts as
# specli does, and its greedy text is identical).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LLAMA_DIR=${LLAMA_DIR:-$ROOT/.cache/llama.cpp}
VERSION=0.3.36
SRC=$LLAMA_DIR/llama_cpp_python-$VERSION/vendor/llama.cpp
SERVER=$SRC/build/bin/llama-server
GGUF=$LLAMA_DIR/gguf
PORT=${PORT:-8090}
THREADS=${THREADS:-2}
PY=${PYTHON:-python}

build() {
  mkdir -p "$LLAMA_DIR" "$GGUF"
  if [ ! -d "$SRC" ]; then
    "$PY" -m pip download "llama-cpp-python==$VERSION" --no-binary :all: --no-deps -d "$LLAMA_DIR"
    tar xzf "$LLAMA_DIR/llama_cpp_python-$VERSION.tar.gz" -C "$LLAMA_DIR"
  fi
  if [ ! -x "$SERVER" ]; then
    # No AMX: this CPU lists amx_int8 but the VM traps its tile instructions ("Illegal instruction" in
    # ggml's tinygemm_kernel_amx on the first quantized matmul), so -march=native goes without it.
    local no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON \
      -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx"
    cmake --build "$SRC/build" --target llama-server -j "${JOBS:-$(nproc)}"
  fi
  "$PY" -m pip install -q "$SRC/gguf-py" sentencepiece  # the converter's own dependencies
  for model in tiny-target tiny-draft; do
    "$PY" scripts/gguf_convert.py "$SRC" "$ROOT/specli/embedded/$model" "$GGUF/$model.gguf"
  done
  echo "built: $SERVER; GGUF files in $GGUF"
}

serve() {  # $1: extra llama-server arguments (the drafting mode)
  exec "$SERVER" -m "$GGUF/tiny-target.gguf" --host 127.0.0.1 --port "$PORT" -t "$THREADS" -c 2048 \
    --metrics --no-webui "$@"
}

start_servers() {  # $1: the GGUF file, $2: context, then "name:llama-server arguments" per server
  # Sets ENDPOINTS (bench's --endpoint options); the servers stop when the script exits.
  local file=$1 context=$2 port=$PORT; shift 2
  ENDPOINTS=(); PIDS=()  # global: the EXIT trap runs after this function returns
  for mode in "$@"; do
    name=${mode%%:*}; args=${mode#*:}
    # shellcheck disable=SC2086
    "$SERVER" -m "$file" --host 127.0.0.1 --port "$port" -t "$THREADS" -c "$context" \
      --metrics --no-webui $args > "$LLAMA_DIR/server-$name.log" 2>&1 &
    PIDS+=($!)
    ENDPOINTS+=(--endpoint "llama-server $name=http://127.0.0.1:$port/v1")
    port=$((port + 1))
  done
  trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
  local i=0
  for p in $(seq "$PORT" $((port - 1))); do  # wait until each answers (a real model loads in seconds)
    for _ in $(seq 120); do
      curl -sf "http://127.0.0.1:$p/health" >/dev/null && break
      kill -0 "${PIDS[$i]}" 2>/dev/null || { echo "llama-server on port $p exited: see $LLAMA_DIR/server-*.log" >&2; break; }
      sleep 1
    done
    i=$((i + 1))
  done
}

bench() {  # three llama-servers in turn: plain, with the drafter, with n-gram drafting
  # ngram-simple drafts --spec-ngram-simple-size-m tokens after an n-token match (defaults 48 and 12);
  # set to specli lookup's n-gram 3 and k 4. --spec-draft-n-max does not apply to it.
  start_servers "$GGUF/tiny-target.gguf" 2048 "plain:" \
    "draft:-md $GGUF/tiny-draft.gguf --spec-type draft-simple --spec-draft-n-max 4" \
    "ngram:--spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 4"
  specli bench --strategy draft --strategy lookup "${ENDPOINTS[@]}" --threads "$THREADS" "$@"
}

bench_real() {  # $1: a packaged model's preset; llama-server plain and with n-gram drafting on its file
  # The file is the package's own GGUF (SmolLM2: Q4_1), which specli dequantizes to --dtype; llama.cpp
  # computes on the quantized blocks. --jinja: the file's own chat template (SmolLM2's adds its default
  # system message, as transformers' does). n-gram: specli lookup's longest n-gram (3) and k (16).
  local model=$1; shift
  local file
  file=$("$PY" -c 'import sys; from specli.models.packaged import packaged_gguf; print(packaged_gguf(sys.argv[1]))' "$model")
  start_servers "$file" 4096 "plain:--jinja" \
    "ngram:--jinja --spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 16"
  specli bench --preset "$model" --strategy lookup "${ENDPOINTS[@]}" --threads "$THREADS" "$@"
}

trained() {  # $1: a drafter `specli train` wrote (trained:NAME, not shipped: docs/training.md#recipes) -> its
  # folder, or its error (the command that trains it) and exit 2
  "$PY" -c 'import sys
from specli.errors import SpecliError
from specli.models.model_dirs import trained_model
try:
    print(trained_model(sys.argv[1]))
except SpecliError as err:
    sys.exit(f"error: {err.message}\n{err.hint}")' "$1"
}

bench_drafters() {  # SmolLM2's trained drafters (trained:NAME) beside llama-server on the package's GGUF:
  # plain, -md the draft model converted to GGUF, n-gram, and -md the EAGLE-3 head converted with
  # --target-model-dir (specli's folder of SmolLM2: its config and tokenizer); specli's draft and eagle
  # in the same run. EAGLE3=0 leaves the head's server out.
  local file target_dir draft head eagle=()
  draft=$(trained smollm2-135m-draft)
  file=$("$PY" -c 'from specli.models.packaged import packaged_gguf; print(packaged_gguf("smollm2-135m"))')
  target_dir=$("$PY" -c 'import sys; from pathlib import Path; from specli.models.gguf_cache import folder_for
print(folder_for(Path(sys.argv[1]), "package:smollm2-135m", weights=False))' "$file")
  "$PY" "$SRC/convert_hf_to_gguf.py" "$draft" --outtype f16 \
    --outfile "$GGUF/smollm2-135m-draft.gguf"
  if [ "${EAGLE3:-1}" = 1 ]; then
    head=$(trained smollm2-135m-eagle3)
    "$PY" "$SRC/convert_hf_to_gguf.py" "$head" --outtype f16 \
      --outfile "$GGUF/smollm2-135m-eagle3.gguf" --target-model-dir "$target_dir"
    eagle=("eagle3:--jinja -md $GGUF/smollm2-135m-eagle3.gguf --spec-type draft-eagle3 --spec-draft-n-max 4")
  fi
  start_servers "$file" 4096 "plain:--jinja" \
    "draft:--jinja -md $GGUF/smollm2-135m-draft.gguf --spec-type draft-simple --spec-draft-n-max 4" \
    "ngram:--jinja --spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 16" \
    "${eagle[@]}"
  specli bench --preset smollm2-135m --strategy draft --strategy eagle "${ENDPOINTS[@]}" --threads "$THREADS" "$@"
}

bench_engine() {  # $1: smollm2-135m|gemma3-270m: specli's llama.cpp engine beside llama-server, one file
  # specli --engine llama.cpp runs the package's GGUF itself (plain, lookup; SmolLM2 also its trained
  # draft model, converted to a GGUF that llama-server's -md serves too); llama-server plain, n-gram
  # (specli lookup's n-gram 3, k 16) and, for SmolLM2, -md that same drafter file.
  local model=$1; shift
  local file draft drafter=() specli_draft=()
  file=$("$PY" -c 'import sys; from specli.models.packaged import packaged_gguf; print(packaged_gguf(sys.argv[1]))' "$model")
  if [ "$model" = smollm2-135m ]; then
    draft=$(trained smollm2-135m-draft)
    "$PY" "$SRC/convert_hf_to_gguf.py" "$draft" --outtype f16 \
      --outfile "$GGUF/smollm2-135m-draft.gguf"
    drafter=("draft:--jinja -md $GGUF/smollm2-135m-draft.gguf --spec-type draft-simple --spec-draft-n-max 4")
    specli_draft=(--strategy draft --draft "$GGUF/smollm2-135m-draft.gguf")
  fi
  # --no-cache-prompt: every request pays its own prefill, as every specli run does (bench_lookup's reason)
  start_servers "$file" 4096 "plain:--jinja --no-cache-prompt" \
    "ngram:--jinja --no-cache-prompt --spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 16" \
    "${drafter[@]/#draft:/draft:--no-cache-prompt }"
  specli bench --preset "$model" --engine llama.cpp --strategy none --strategy lookup "${specli_draft[@]}" \
    "${ENDPOINTS[@]}" --threads "$THREADS" "$@"
}

bench_lookup() {  # $1: smollm2-135m|gemma3-270m: specli lookup on the llama.cpp engine beside llama-server's
  # plain decoding and n-gram drafting (ngram-simple, n 3, m 16), the very GGUF file
  local model=$1; shift
  local file
  file=$("$PY" -c 'import sys; from specli.models.packaged import packaged_gguf; print(packaged_gguf(sys.argv[1]))' "$model")
  # --no-cache-prompt: every request pays its own prefill, as every specli run does (bench clears the
  # engine's cells before each); else the warm-up's prompt and every repeat would skip it on the server
  start_servers "$file" 8192 "plain:--jinja --no-cache-prompt" \
    "ngram:--jinja --no-cache-prompt --spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 16"
  specli bench --preset "$model" --engine llama.cpp --strategy none --strategy lookup "${ENDPOINTS[@]}" \
    --threads "$THREADS" "$@"
}

case "${1:-}" in
  build) build ;;
  serve) shift; serve -md "$GGUF/tiny-draft.gguf" --spec-type draft-simple --spec-draft-n-max 4 "$@" ;;
  bench) shift; bench "$@" ;;
  bench-real) shift; bench_real "$@" ;;
  bench-drafters) shift; bench_drafters "$@" ;;
  bench-engine) shift; bench_engine "$@" ;;
  bench-lookup) shift; bench_lookup "$@" ;;
  *) echo "usage: bash scripts/llama_cpp.sh build|serve|bench|bench-real MODEL|bench-engine MODEL|bench-lookup MODEL|bench-drafters [specli bench options]" >&2
     exit 2 ;;
esac
