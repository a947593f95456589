"""How llama.cpp is built for a machine, and what a build asks of the CPU it runs on.

The one owner of the rules that tie CPU features to llama.cpp's (ggml's) build options: the install
script and the image build ask it for the CMake arguments (``python app/host/llama_build.py cmake-args``),
the server asks it why a worker died of an illegal instruction. Standard library only: it runs
before anything is installed.

Targets:
- ``portable`` (the default): on x86-64 Linux, ggml's runtime CPU dispatch. Every CPU variant of the
  backend (x86-64 baseline up to AVX-512 and AMX) is built as a loadable library installed beside
  ``libggml.so``, and at start-up ggml loads the best one for the CPU it finds. One wheel, one image,
  every x86-64 machine. arm64 Linux gets a fixed Armv8.2-A build with dot-product and FP16
  arithmetic (Neoverse N1 and later: Graviton 2-4, Axion, Ampere); macOS gets Metal.
- ``host``: exactly the features of the CPU it is built on (AMX left out); faster to build, tied to
  that CPU's generation.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# ggml's x86 CMake options (GGML_<name>) and the /proc/cpuinfo flags the compiler switches behind
# each one require (ggml-cpu/CMakeLists.txt), in ggml's order.
X86_OPTIONS: dict[str, tuple[str, ...]] = {
    "SSE42": ("sse4_2",),
    "AVX": ("avx",),
    "F16C": ("f16c",),
    "FMA": ("fma",),
    "AVX2": ("avx2",),
    "BMI2": ("bmi2",),
    "AVX_VNNI": ("avx_vnni",),
    "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "AVX512_VBMI": ("avx512vbmi",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
    "AMX_TILE": ("amx_tile",),
    "AMX_INT8": ("amx_int8",),
    "AMX_BF16": ("amx_bf16",),
}
# A host build leaves AMX out: a native AMX build crashed on the first decode on AMX Xeons.
HOST_BUILD_SKIPS = frozenset({"AMX_TILE", "AMX_INT8", "AMX_BF16"})

# Runtime dispatch: each variant a loadable library, installed beside libggml.so (llama-cpp-python
# installs its own targets to llama_cpp/lib; ggml installs dynamic backends to CMAKE_INSTALL_BINDIR).
DYNAMIC_DISPATCH = ("-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON",
                    "-DCMAKE_INSTALL_BINDIR=llama_cpp/lib")
ARM64_PORTABLE = ("-DGGML_NATIVE=OFF", "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16")
# Every build: ggml's RPC backend (--rpc: layers on other machines' rpc-server), a loadable library too.
EVERY_BUILD = ("-DGGML_RPC=ON",)
TARGETS = ("portable", "host")
# Where the install script and the image build write the CMake arguments they used (in sys.prefix).
BUILD_RECORD = ".llama-cmake-args"


class UnsupportedPlatformError(Exception):
    """No llama.cpp build is defined for this operating system and processor."""


@dataclass(frozen=True)
class Cpu:
    system: str  # platform.system(): Linux, Darwin, ...
    arch: str  # x86_64 or arm64 (normalised), else the machine name as given
    model: str
    flags: frozenset[str]

    def describe(self) -> str:
        return f"{self.model or self.arch} ({self.arch}, {self.system})"


def normalise_arch(machine: str) -> str:
    lowered = machine.lower()
    if lowered in ("x86_64", "amd64"):
        return "x86_64"
    if lowered in ("aarch64", "arm64"):
        return "arm64"
    return lowered


def parse_cpuinfo(text: str, system: str, machine: str) -> Cpu:
    """The first processor of a /proc/cpuinfo text: its model name and its feature flags
    (``flags`` on x86, ``Features`` on Arm)."""
    model = ""
    flags: frozenset[str] = frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = frozenset(value.split())
    return Cpu(system=system, arch=normalise_arch(machine), model=model, flags=flags)


def this_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> Cpu:
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        text = ""
    return parse_cpuinfo(text, platform.system(), platform.machine())


def cmake_args(cpu: Cpu, target: str = "portable") -> tuple[str, ...]:
    """The CMake arguments that build llama-cpp-python for ``cpu`` (see the module docstring)."""
    return (*_platform_args(cpu, target), *EVERY_BUILD)


def _platform_args(cpu: Cpu, target: str) -> tuple[str, ...]:
    if target not in TARGETS:
        raise ValueError(f"unknown build target {target!r}: choose one of {', '.join(TARGETS)}")
    if cpu.system == "Darwin":
        return ("-DGGML_METAL=ON",) if cpu.arch == "arm64" else ("-DGGML_METAL=OFF",)
    if cpu.system != "Linux":
        raise UnsupportedPlatformError(f"no llama.cpp build is defined for {cpu.system}: use Linux or macOS")
    if cpu.arch == "x86_64":
        return DYNAMIC_DISPATCH if target == "portable" else host_x86_args(cpu.flags)
    if cpu.arch == "arm64":
        return ARM64_PORTABLE if target == "portable" else ("-DGGML_NATIVE=ON",)
    raise UnsupportedPlatformError(f"no llama.cpp build is defined for {cpu.arch} Linux: use x86-64 or arm64")


def host_x86_args(flags: Iterable[str]) -> tuple[str, ...]:
    have = frozenset(flags)
    switches = [
        f"-DGGML_{option}={'ON' if set(needs) <= have else 'OFF'}"
        for option, needs in X86_OPTIONS.items()
        if option not in HOST_BUILD_SKIPS
    ]
    return ("-DGGML_NATIVE=OFF", *switches)


def options_on(args: Iterable[str]) -> frozenset[str]:
    """The GGML_* options a CMake argument list switches on, without the prefix."""
    names = set()
    for arg in args:
        name, _, value = arg.removeprefix("-D").partition("=")
        name = name.split(":", 1)[0]
        if name.startswith("GGML_") and value.upper() in ("ON", "1", "TRUE", "YES"):
            names.add(name.removeprefix("GGML_"))
    return frozenset(names)


def is_dynamic_dispatch(args: Iterable[str]) -> bool:
    return {"BACKEND_DL", "CPU_ALL_VARIANTS"} <= options_on(args)


def missing_features(args: Iterable[str], cpu: Cpu) -> list[str]:
    """The CPU flags a fixed-feature build needs that ``cpu`` lacks (none for runtime dispatch,
    which picks a variant the CPU can run)."""
    args = list(args)
    if cpu.arch != "x86_64" or is_dynamic_dispatch(args):
        return []
    on = options_on(args)
    if "NATIVE" in on:
        return []  # built for the build machine's CPU: nothing to compare against here
    needed = [flag for option, flags in X86_OPTIONS.items() if option in on for flag in flags]
    return [flag for flag in dict.fromkeys(needed) if flag not in cpu.flags]


def illegal_instruction_advice(cpu: Cpu, build_args: Sequence[str] | None) -> str:
    """Why a worker died of SIGILL, and how to rebuild, for the server's log."""
    relevant = sorted(flag for option in X86_OPTIONS.values() for flag in option if flag in cpu.flags)
    has = f"this CPU is {cpu.describe()} with {' '.join(relevant) or 'none of the SIMD extensions'}"
    portable = ("rebuild the portable way: unset LLAMA_CMAKE_ARGS and run `bash scripts/dev.sh install` "
                "(or build the image again)")
    if build_args is None:
        return f"{has}; the llama.cpp build flags were not recorded; {portable}"
    if is_dynamic_dispatch(build_args):
        return (f"{has}; the build uses runtime CPU dispatch, which should have picked a variant this CPU "
                "runs: please report it with this log; meanwhile build for this CPU alone with "
                "`LLAMA_CPU_TARGET=host bash scripts/dev.sh install`")
    missing = missing_features(build_args, cpu)
    needs = f", which needs {' '.join(missing)} that this CPU lacks" if missing else ""
    return f"{has}; llama.cpp was built for CPU features this machine lacks ({' '.join(build_args)}{needs}); {portable}"


def recorded_build_args(prefix: Path = Path(sys.prefix)) -> tuple[str, ...] | None:
    """The CMake arguments the installed llama-cpp-python was built with, as the install script
    and the image build record them in the environment's prefix."""
    try:
        return tuple((prefix / BUILD_RECORD).read_text().split())
    except OSError:
        return None



def _pyproject_beside(script: Path) -> Path:
    """The repository's pyproject.toml (this file is app/host/llama_build.py); where the file was copied
    alone (the Dockerfile copies it and pyproject.toml into one folder), the one beside it."""
    repository = script.parents[2] / "pyproject.toml" if len(script.parents) > 2 else None
    return repository if repository is not None and repository.is_file() else script.with_name("pyproject.toml")


PYPROJECT = _pyproject_beside(Path(__file__).resolve())


def pinned_version(pyproject: Path = PYPROJECT) -> str:
    """The llama-cpp-python version the project pins: its one ``==`` dependency in pyproject.toml."""
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    for dependency in dependencies:
        match = re.fullmatch(r"llama-cpp-python\s*==\s*([\w.]+)", dependency.strip())
        if match:
            return match.group(1)
    raise ValueError(f"{pyproject} pins no llama-cpp-python version")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llama_build.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    args_command = commands.add_parser("cmake-args", help="print the CMake arguments for this machine")
    args_command.add_argument("--target", choices=TARGETS, default="portable")
    args_command.add_argument("--cpuinfo", type=Path, default=Path("/proc/cpuinfo"),
                              help="read the CPU from this file instead of /proc/cpuinfo")
    version_command = commands.add_parser("version", help="print the llama-cpp-python version pyproject.toml pins")
    version_command.add_argument("--pyproject", type=Path, default=PYPROJECT)
    options = parser.parse_args(argv)
    if options.command == "version":
        print(pinned_version(options.pyproject))
        return 0
    try:
        print(" ".join(cmake_args(this_cpu(options.cpuinfo), options.target)))
    except UnsupportedPlatformError as exc:
        print(f"llama_build.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
