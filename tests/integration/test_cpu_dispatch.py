"""The portable build on CPUs older than this machine's: the installed wheel runs under QEMU's
user-mode emulation of a Haswell (AVX2, no AVX-512) and a Nehalem (SSE4.2, no AVX) CPU, and ggml
picks the variant each one can run. scripts/dev.sh test installs qemu-user."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys

import pytest

from app.host.llama_build import this_cpu
from tests.integration.conftest import ROOT

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the x86-64 CPU variants")
PROBE = [sys.executable, str(ROOT / "tests" / "cpu_probe.py")]


def probe(prefix: list[str]) -> dict[str, object]:
    result = subprocess.run([*prefix, *PROBE], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    found: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize(("qemu_cpu", "variant"), [("Haswell", "libggml-cpu-haswell.so"),
                                                   ("Nehalem", "libggml-cpu-sse42.so")])
def test_the_portable_build_runs_on_an_older_cpu(qemu_cpu: str, variant: str) -> None:
    qemu = shutil.which("qemu-x86_64")
    assert qemu, "qemu-x86_64 is missing: bash scripts/dev.sh test installs Debian's qemu-user"
    emulated = probe([qemu, "-cpu", qemu_cpu])
    assert emulated["variant"] == variant
    assert isinstance(emulated["tokens"], list) and len(emulated["tokens"]) == 8


def test_this_cpu_gets_a_variant_that_uses_its_vector_units() -> None:
    native = probe([])
    flags = this_cpu().flags
    assert isinstance(native["variant"], str)
    if "avx512f" in flags:
        assert native["variant"] in {f"libggml-cpu-{name}.so" for name in (
            "skylakex", "cannonlake", "cascadelake", "icelake", "cooperlake", "zen4", "sapphirerapids")}
    elif "avx2" in flags:
        assert native["variant"] in ("libggml-cpu-haswell.so", "libggml-cpu-alderlake.so")
