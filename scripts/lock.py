"""Write the image's lock files, every package pinned with its hashes (pip-compile, from pip-tools):

    python scripts/lock.py

- ``docker/requirements.lock``: vertex-llama's dependencies (pyproject.toml) and docker/build.in, resolved for
  the image's Python (3.11, Linux x86-64); the image installs it with ``--require-hashes --no-deps``.
- ``docker/model.lock`` and ``docker/cuda.lock``: the pins of docker/model.in and docker/cuda.in alone (they are
  installed without their dependencies), with their hashes.

Run it after changing a dependency; tests/unit/test_image_files.py checks that the locks still satisfy
pyproject.toml and the .in files. pip-tools is installed into a throwaway virtual environment."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
COMPILE = ["--quiet", "--generate-hashes", "--allow-unsafe", "--strip-extras", "--no-header",
           "--annotation-style", "line", "--no-emit-index-url", "--no-emit-find-links", "--no-emit-trusted-host"]


def pip_compile(tools: Path, output: Path, *inputs: Path) -> None:
    relative = [str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path) for path in inputs]
    subprocess.run([str(tools / "bin" / "pip-compile"), *COMPILE, "-o", str(output), *relative], check=True, cwd=ROOT)


def only_pinned(lock: str, names: list[str]) -> str:
    """The stanzas of ``lock`` (a name, its hashes) for ``names`` alone."""
    stanzas = re.split(r"\n(?=\S)", lock.strip())
    kept = [stanza for stanza in stanzas if stanza.split("==", 1)[0].lower() in names]
    return "\n".join(kept) + "\n"


def pins(path: Path) -> list[str]:
    return [line.split("==", 1)[0].strip().lower() for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        tools = Path(scratch) / "venv"
        venv.create(tools, with_pip=True)
        subprocess.run([str(tools / "bin" / "pip"), "install", "--quiet", "pip-tools>=7.4"], check=True)
        pip_compile(tools, DOCKER / "requirements.lock", ROOT / "pyproject.toml", DOCKER / "build.in")
        for name in ("model", "cuda"):
            full = Path(scratch) / f"{name}.lock"
            pip_compile(tools, full, DOCKER / f"{name}.in")
            (DOCKER / f"{name}.lock").write_text(only_pinned(full.read_text(), pins(DOCKER / f"{name}.in")))
    print("wrote docker/requirements.lock, docker/model.lock, docker/cuda.lock", file=sys.stderr)


if __name__ == "__main__":
    main()
