"""Why a CUDA build serves on the CPU: no NVIDIA driver, a driver older than the build's CUDA, or
no GPU; said once at start-up, so that a CUDA image on the wrong node says so in its first lines.

A CUDA build of llama.cpp ships its GPU backend as ``libggml-cuda.so`` beside the CPU variants. ggml
loads it when it can: it needs the driver's ``libcuda.so.1`` (mounted from the host: Vertex AI puts it
under /usr/local/nvidia) and a driver at least as new as the CUDA runtime it was built against (CUDA's
minor-version compatibility: any driver of the same major release). When it cannot, ggml quietly
keeps only the CPU; this module finds out which of the reasons holds.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CUDA_BACKEND = "libggml-cuda.so"
DRIVER_LIBRARY = "libcuda.so.1"
_HEAD_BYTES = 8 << 20  # the dynamic string table lies near the start of the library
# The oldest driver branch of each CUDA major release (Linux), for the message.
DRIVER_BRANCH = {12: "R525", 13: "R580"}


@dataclass(frozen=True)
class DriverVerdict:
    usable: bool
    message: str


def cuda_runtime_major(backend: Path) -> int | None:
    """The CUDA major release ``libggml-cuda.so`` was linked against (its ``libcudart.so.N``)."""
    try:
        with backend.open("rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError:
        return None
    found = re.search(rb"libcudart\.so\.(\d+)", head)
    return int(found.group(1)) if found else None


def driver_cuda_version(load: Callable[[str], ctypes.CDLL] = ctypes.CDLL) -> int | None:
    """The CUDA version the installed driver supports (``12040`` for 12.4); None without a driver."""
    try:
        driver = load(DRIVER_LIBRARY)
    except OSError:
        return None
    version = ctypes.c_int(0)
    if driver.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return int(version.value)


def judge(lib_dir: Path, gpus: int, load: Callable[[str], ctypes.CDLL] = ctypes.CDLL) -> DriverVerdict | None:
    """None for a build without a CUDA backend; else whether it can use a GPU here, and why not."""
    backend = lib_dir / CUDA_BACKEND
    if not backend.exists():
        return None
    needed = cuda_runtime_major(backend)
    driver = driver_cuda_version(load)
    if driver is None:
        return DriverVerdict(False, f"this is a CUDA build, but no NVIDIA driver was found ({DRIVER_LIBRARY}): "
                                    "serving on the CPU")
    have = f"{driver // 1000}.{driver % 1000 // 10}"
    if needed is not None and driver // 1000 < needed:
        branch = DRIVER_BRANCH.get(needed, f"CUDA {needed}'s")
        return DriverVerdict(False, f"the NVIDIA driver supports CUDA {have}, and this build needs CUDA {needed} "
                                    f"(driver {branch} or later): serving on the CPU; use a node with a newer "
                                    "driver, or an image built for that CUDA release")
    if gpus == 0:
        return DriverVerdict(False, f"the NVIDIA driver (CUDA {have}) found no GPU: serving on the CPU")
    return DriverVerdict(True, f"CUDA build on {gpus} GPU(s), driver for CUDA {have}")
