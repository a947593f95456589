"""Cold start of the built image: from the container's start to its first ``/health`` 200, with the
embedded model and with a model from ``AIP_STORAGE_URI`` (the storage emulator), beside the same
server started from this checkout's virtualenv in the same run (the container's own cost is the
ratio). Runs are one after another, never two servers at once.

    .venv/bin/python bench/image_startup.py [--image localhost/vertex-llama:cpu] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import free_port
from tests.containers import container_tool, run_container
from tests.integration.conftest import model_in_storage

ROOT = Path(__file__).resolve().parents[1]


def until_healthy(port: int, alive: Callable[[], bool]) -> float:
    started = time.monotonic()
    while True:
        if not alive():
            raise RuntimeError("the server exited before it was healthy")
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return time.monotonic() - started
        except requests.ConnectionError:
            pass
        time.sleep(0.02)


def container_start(tool: str, image: str, env: dict[str, str], work: Path) -> float:
    port = free_port()
    began = time.monotonic()
    container = run_container(tool, image, {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port), **env},
                              work / f"container-{port}.log")
    try:
        until_healthy(port, lambda: container.process.poll() is None)
        return time.monotonic() - began
    finally:
        container.remove()


def venv_start(env: dict[str, str], work: Path) -> float:
    port = free_port()
    began = time.monotonic()
    with (work / f"venv-{port}.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "app", "--host", "127.0.0.1"], cwd=ROOT, stdout=log,
                                   stderr=subprocess.STDOUT,
                                   env={"PATH": "/usr/bin:/bin", "HOME": str(work / f"home-{port}"),  # an empty cache
                                        "AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port), **env})
    try:
        until_healthy(port, lambda: process.poll() is None)
        return time.monotonic() - began
    finally:
        process.terminate()
        process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="localhost/vertex-llama:cpu")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tool = container_tool()
    with tempfile.TemporaryDirectory() as folder, model_in_storage() as (emulator, uri):
        work = Path(folder)
        storage = {"AIP_STORAGE_URI": uri.rsplit("/", 1)[0], "STORAGE_EMULATOR_HOST": emulator}
        print(f"cold start to /health 200, median of {args.runs} ({tool}, {args.image})")
        print(f"{'model':<28} {'image':>9} {'venv':>9} {'image / venv':>13}")
        for label, env in (("embedded SmolLM2", {}), ("gs:// (storage emulator)", storage)):
            image = statistics.median(container_start(tool, args.image, env, work) for _ in range(args.runs))
            venv = statistics.median(venv_start(env, work) for _ in range(args.runs))
            print(f"{label:<28} {image:>8.2f}s {venv:>8.2f}s {image / venv:>13.2f}")


if __name__ == "__main__":
    main()
