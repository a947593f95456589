"""The CPU-feature to build-flag rules of app/host/llama_build.py, over /proc/cpuinfo texts of the CPUs
Vertex AI and the development machines run on."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.host.llama_build import (
    DYNAMIC_DISPATCH,
    Cpu,
    UnsupportedPlatformError,
    cmake_args,
    illegal_instruction_advice,
    missing_features,
    options_on,
    parse_cpuinfo,
    pinned_version,
    recorded_build_args,
)

ROOT = Path(__file__).resolve().parents[2]
COMMON = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall"
AMD_AVX2 = f"{COMMON} nx mmxext lm constant_tsc rep_good nopl pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy abm sse4a bmi1 avx2 smep bmi2 rdseed adx clflushopt sha_ni xsaveopt"  # noqa: E501
INTEL_AVX512 = f"{COMMON} pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 popcnt aes xsave avx f16c bmi1 avx2 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni"  # noqa: E501
SAPPHIRE_RAPIDS = f"{INTEL_AVX512} avx512ifma avx512vbmi avx512_vbmi2 avx512_bf16 avx_vnni amx_bf16 amx_tile amx_int8"
NEOVERSE_V2 = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm sb paca pacg dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16"  # noqa: E501


def cpuinfo(model: str, flags: str, arm: bool = False) -> str:
    if arm:
        return f"processor\t: 0\nBogoMIPS\t: 2000.00\nFeatures\t: {flags}\nCPU implementer\t: 0x41\n\nprocessor\t: 1\n"
    return (f"processor\t: 0\nvendor_id\t: x\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
            f"processor\t: 1\nmodel name\t: {model}\nflags\t\t: {flags}\n")


AMD = parse_cpuinfo(cpuinfo("AMD EPYC 7B12", AMD_AVX2), "Linux", "x86_64")
INTEL = parse_cpuinfo(cpuinfo("Intel(R) Xeon(R) CPU @ 2.20GHz", INTEL_AVX512), "Linux", "x86_64")
SPR = parse_cpuinfo(cpuinfo("Intel(R) Xeon(R) Platinum 8481C", SAPPHIRE_RAPIDS), "Linux", "x86_64")
AXION = parse_cpuinfo(cpuinfo("", NEOVERSE_V2, arm=True), "Linux", "aarch64")


def test_cpuinfo_gives_the_model_and_flags_of_the_first_processor() -> None:
    assert AMD.model == "AMD EPYC 7B12" and AMD.arch == "x86_64"
    assert "avx2" in AMD.flags and "avx512f" not in AMD.flags
    assert {"amx_tile", "amx_int8", "avx512_bf16"} <= SPR.flags
    assert AXION.arch == "arm64" and {"asimddp", "sve2", "i8mm"} <= AXION.flags


@pytest.mark.parametrize("cpu", [AMD, INTEL, SPR], ids=["amd-avx2", "intel-avx512", "sapphire-rapids"])
def test_the_portable_x86_build_is_the_same_runtime_dispatch_build_on_every_cpu(cpu: Cpu) -> None:
    args = cmake_args(cpu)
    assert args == (*DYNAMIC_DISPATCH, "-DGGML_RPC=ON")
    assert {"BACKEND_DL", "CPU_ALL_VARIANTS", "RPC"} <= options_on(args) and "NATIVE" not in options_on(args)
    assert missing_features(args, AMD) == []


def test_a_host_build_switches_on_exactly_what_the_cpu_has() -> None:
    amd = options_on(cmake_args(AMD, "host"))
    assert {"AVX", "AVX2", "FMA", "F16C", "BMI2", "SSE42"} <= amd
    assert not amd & {"AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI"}
    intel = options_on(cmake_args(INTEL, "host"))
    assert {"AVX512", "AVX512_VNNI"} <= intel and "AVX512_BF16" not in intel
    assert missing_features(cmake_args(AMD, "host"), AMD) == []
    assert missing_features(cmake_args(INTEL, "host"), INTEL) == []


def test_a_host_build_leaves_amx_out() -> None:
    spr = options_on(cmake_args(SPR, "host"))
    assert {"AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI"} <= spr
    assert not spr & {"AMX_TILE", "AMX_INT8", "AMX_BF16"}


def test_an_avx512_build_is_known_to_be_missing_features_on_an_avx2_cpu() -> None:
    """The build that crashed on the AVX2-only EPYC: its missing features are named."""
    old_default = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
                   "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON", "-DGGML_AVX_VNNI=ON"]
    missing = missing_features(old_default, AMD)
    assert missing == ["avx_vnni", "avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw", "avx512_vnni",
                       "avx512_bf16"]
    assert missing_features(cmake_args(SPR, "host"), INTEL) == ["avx_vnni", "avx512vbmi", "avx512_bf16"]
    advice = illegal_instruction_advice(AMD, old_default)
    assert "AMD EPYC 7B12" in advice and "avx2" in advice and "avx512f" in advice
    assert "bash scripts/dev.sh install" in advice


def test_arm64_never_gets_an_x86_flag() -> None:
    for target in ("portable", "host"):
        args = cmake_args(AXION, target)
        assert not any(name in options_on(args) for name in ("AVX", "AVX2", "AVX512", "FMA", "F16C", "SSE42"))
    assert "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16" in cmake_args(AXION)
    assert cmake_args(AXION, "host") == ("-DGGML_NATIVE=ON", "-DGGML_RPC=ON")
    assert missing_features(cmake_args(INTEL, "host"), AXION) == []


def test_macos_builds_for_metal_and_other_systems_are_refused_with_a_reason() -> None:
    mac = Cpu(system="Darwin", arch="arm64", model="Apple M2", flags=frozenset())
    assert cmake_args(mac) == ("-DGGML_METAL=ON", "-DGGML_RPC=ON")  # every build has the RPC backend (--rpc)
    with pytest.raises(UnsupportedPlatformError, match="Windows"):
        cmake_args(Cpu(system="Windows", arch="x86_64", model="", flags=frozenset()))
    with pytest.raises(UnsupportedPlatformError, match="riscv64"):
        cmake_args(Cpu(system="Linux", arch="riscv64", model="", flags=frozenset()))


def test_the_build_record_is_read_from_the_environment_prefix(tmp_path: Path) -> None:
    assert recorded_build_args(tmp_path) is None
    (tmp_path / ".llama-cmake-args").write_text(" ".join(DYNAMIC_DISPATCH))
    assert recorded_build_args(tmp_path) == DYNAMIC_DISPATCH


def test_the_script_prints_the_arguments_the_install_script_uses(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(cpuinfo("AMD EPYC 7B12", AMD_AVX2))
    here = parse_cpuinfo(info.read_text(), platform.system(), platform.machine())
    script = [sys.executable, str(ROOT / "app" / "host" / "llama_build.py"), "cmake-args", "--cpuinfo", str(info)]
    for target in ("portable", "host"):
        printed = subprocess.run([*script, "--target", target], capture_output=True, text=True, check=True)
        assert tuple(printed.stdout.split()) == cmake_args(here, target)


def test_the_script_runs_where_the_dockerfile_copies_it(tmp_path: Path) -> None:
    """The Dockerfile copies llama_build.py and pyproject.toml alone into /tmp: the version comes from
    the pyproject.toml beside it (once a module constant that needed the repository's folders)."""
    shutil.copy(ROOT / "app" / "host" / "llama_build.py", tmp_path / "llama_build.py")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    copied = [sys.executable, str(tmp_path / "llama_build.py")]
    version = subprocess.run([*copied, "version"], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert version.strip() == pinned_version()
    assert subprocess.run([*copied, "cmake-args"], capture_output=True, text=True, check=True).stdout.strip()
