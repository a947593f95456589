"""llama-server, built from the llama.cpp that the pinned llama-cpp-python vendors, with the CPU
flags of the project's own build (app/host/llama_build.py), for the benchmark to compare against.

    .venv/bin/python bench/llama_server.py        # builds (once; cached) and prints the binary's path

The sdist comes from the package index (pip download); the build is cached under
``$XDG_CACHE_HOME/vertex-llama/llama-server/<version>-<flags hash>``. Its web UI is left out
(``-DLLAMA_USE_PREBUILT_UI=OFF``: the prebuilt one is a download, and there is no network here).
A first build takes about 16 minutes on two cores (every CPU variant of a portable build)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.host.llama_build import EVERY_BUILD, cmake_args, pinned_version, this_cpu  # noqa: E402

SERVER_OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
                  "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF")


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vertex-llama" / "llama-server"


def build_args() -> tuple[str, ...]:
    """The project's own CPU flags (its install folder option and the RPC backend, which no benchmark uses,
    dropped), then the server's."""
    flags = tuple(arg for arg in cmake_args(this_cpu()) if not arg.startswith("-DCMAKE_INSTALL_")
                  and arg not in EVERY_BUILD)
    return (*flags, *SERVER_OPTIONS)


def build_folder() -> Path:
    args = build_args()
    return cache_root() / f"{pinned_version()}-{hashlib.sha256(' '.join(args).encode()).hexdigest()[:12]}"


def _extract_llama_cpp(version: str, source: Path) -> None:
    """The sdist's vendor/llama.cpp, into ``source``."""
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={version}", "-d", scratch], check=True, capture_output=True)
        archive = next(Path(scratch).glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(archive) as sdist:
            top = sdist.getmembers()[0].name.split("/")[0]  # llama_cpp_python-VERSION
            prefix = f"{top}/vendor/llama.cpp"
            members = [m for m in sdist.getmembers() if m.name.startswith(prefix + "/")]
            for member in members:
                member.name = member.name[len(prefix) + 1:]
            sdist.extractall(source, members=members, filter="data")


def llama_server() -> Path:
    """The llama-server binary for this machine's build flags, built when not cached."""
    folder = build_folder()
    binary = folder / "build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "llama.cpp"
    if not source.exists():
        _extract_llama_cpp(pinned_version(), source)
    build = folder / "build"
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", *build_args()], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(os.cpu_count() or 2)],
                   check=True)
    return binary


if __name__ == "__main__":
    print(llama_server())
