"""A CUDA build that cannot use a GPU says why at start-up: no driver, a driver older than its CUDA
release, or no GPU (app/engine/llama/gpu_driver.py), with the driver library faked."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest

from app.engine.llama.gpu_driver import CUDA_BACKEND, judge


class FakeDriver:
    def __init__(self, version: int) -> None:
        self.version = version

    def cuDriverGetVersion(self, pointer: Any) -> int:
        ctypes.cast(pointer, ctypes.POINTER(ctypes.c_int))[0] = self.version
        return 0


def loader(version: int | None) -> Any:
    def load(name: str) -> Any:
        if version is None:
            raise OSError(f"{name}: cannot open shared object file")
        return FakeDriver(version)
    return load


@pytest.fixture
def cuda_lib(tmp_path: Path) -> Path:
    (tmp_path / CUDA_BACKEND).write_bytes(b"\x7fELF...libcublas.so.13\x00libcudart.so.13\x00...")
    return tmp_path


def test_a_cpu_build_says_nothing(tmp_path: Path) -> None:
    assert judge(tmp_path, 0, loader(None)) is None


def test_no_driver(cuda_lib: Path) -> None:
    verdict = judge(cuda_lib, 0, loader(None))
    assert verdict is not None and not verdict.usable
    assert "no NVIDIA driver" in verdict.message and "serving on the CPU" in verdict.message


def test_a_driver_older_than_the_build(cuda_lib: Path) -> None:
    verdict = judge(cuda_lib, 0, loader(12040))
    assert verdict is not None and not verdict.usable
    assert "CUDA 12.4" in verdict.message and "needs CUDA 13" in verdict.message and "R580" in verdict.message


def test_a_new_enough_driver_without_a_gpu_and_with_one(cuda_lib: Path) -> None:
    none = judge(cuda_lib, 0, loader(13000))
    assert none is not None and not none.usable and "found no GPU" in none.message
    one = judge(cuda_lib, 1, loader(13020))
    assert one is not None and one.usable and "1 GPU(s)" in one.message and "CUDA 13.2" in one.message
