"""The serving image, built once for the session by scripts/image.sh (a no-op when the image already
carries the hash of its inputs: scripts/dev.sh test builds it before pytest runs)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.containers import ROOT, container_tool


@pytest.fixture(scope="session")
def tool() -> str:
    return container_tool()


@pytest.fixture(scope="session")
def image(tool: str) -> str:
    name = os.environ.get("VERTEX_LLAMA_IMAGE")
    if name:
        return name
    subprocess.run(["bash", str(ROOT / "scripts/image.sh"), "build", "cpu"], check=True)
    return "localhost/vertex-llama:cpu"
