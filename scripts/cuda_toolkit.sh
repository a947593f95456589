#!/usr/bin/env bash
# A CUDA toolkit made of PyPI's wheels, in the layout CMake's FindCUDAToolkit expects; prints its root.
#
#   bash scripts/cuda_toolkit.sh PREFIX      # e.g. ~/.cache/vertex-llama/cuda-13.0
#
# NVIDIA publishes nvcc (with ptxas, nvlink, fatbinary, cicc) on PyPI for CUDA 13 only; the CUDA 12
# wheels hold ptxas but no nvcc. The wheels are pinned to one release (13.0) so headers and libraries
# agree. What the wheels leave out is added here: `lib64`, the unversioned library names the linker
# asks for, and a stub of the driver library (libcuda.so, SONAME libcuda.so.1) exporting every
# function cuda.h declares, to link against: the real one comes with the GPU's driver at run time.
# Building with it needs a driver of CUDA 13's at run time (R580 or later).
set -euo pipefail
shopt -s inherit_errexit
PREFIX=${1:?usage: cuda_toolkit.sh PREFIX}
PYTHON=${PYTHON:-python3}
PACKAGES=("nvidia-cuda-nvcc==13.0.88" "nvidia-nvvm==13.0.88" "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-crt==13.0.88"
          "nvidia-cuda-cccl==13.0.85" "nvidia-cublas==13.0.2.14" "nvidia-cuda-nvrtc==13.0.88")
ROOT="$PREFIX/nvidia/cu13"
if [ ! -x "$ROOT/bin/nvcc" ]; then
  "$PYTHON" -m pip install --quiet --no-deps --target "$PREFIX" "${PACKAGES[@]}" >&2
fi
cd "$ROOT"
[ -e lib64 ] || ln -s lib lib64
for lib in lib/*.so.*; do  # the unversioned names the linker asks for
  base=${lib%%.so.*}.so
  [ -e "$base" ] || ln -s "$(basename "$lib")" "$base"
done
if [ ! -e lib/stubs/libcuda.so ]; then  # the driver API stub (libcuda itself comes with the GPU's driver)
  mkdir -p lib/stubs
  gcc -E -P -I include include/cuda.h | grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' | tr -d '( \t' | sort -u \
    | awk '{ printf "int %s(void) { return 999; }\n", $1 }' > lib/stubs/cuda_stub.c
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o lib/stubs/libcuda.so lib/stubs/cuda_stub.c
  ln -sf libcuda.so lib/stubs/libcuda.so.1
fi
echo "$ROOT"
