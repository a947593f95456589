"""Single-stream speed of the portable llama.cpp build (runtime CPU dispatch) against a build tuned
for this CPU: the same server, model and requests, one run, the servers one after the other.

    .venv/bin/python bench/cpu_builds.py [--host-wheel PATH] [--max-tokens 128] [--rounds 3]

The portable build is the installed one. The host-tuned wheel is --host-wheel, or else the one
`LLAMA_CPU_TARGET=host bash scripts/dev.sh wheel` builds (or finds in the wheel cache); it is
unpacked into a temporary directory that goes first on the second server's PYTHONPATH. Rounds
alternate between the builds; each build's best round is reported. Not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.host.llama_build import this_cpu  # noqa: E402
from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.report import free_port, one_chat, running, streams_tokens_per_second  # noqa: E402


def host_wheel() -> Path:
    result = subprocess.run(["bash", str(ROOT / "scripts" / "dev.sh"), "wheel"], cwd=ROOT, check=True,
                            capture_output=True, text=True, env={**os.environ, "LLAMA_CPU_TARGET": "host",
                                                                 "LLAMA_CMAKE_ARGS": ""})
    return Path(result.stdout.strip().splitlines()[-1])


def tokens_per_second(model: str, threads: int, max_tokens: int, log: Path, pythonpath: str | None) -> float:
    port = free_port()
    command = [sys.executable, "-m", "app", "--model", model, "--port", str(port), "-np", "1", "-c", "2048",
               "-t", str(threads)]
    env = {"PYTHONPATH": pythonpath} if pythonpath else {}
    with running(command, port, "/health", env, log) as server:
        one_chat(server.base, "warm up", 8)
        return streams_tokens_per_second(server.base, 1, max_tokens)


def cpu_variant(log: Path) -> str:
    found = re.findall(r"llama\.cpp CPU backend (\S+?):", log.read_text(errors="replace"))
    return found[-1] if found else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host-wheel", type=Path)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    model = str(embedded_model_path())
    wheel = args.host_wheel or host_wheel()
    with tempfile.TemporaryDirectory(prefix="host-build-") as unpacked:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
        builds = {"portable (installed)": None, "host-tuned": unpacked}
        logs = {name: Path(unpacked) / f"server-{index}.log" for index, name in enumerate(builds)}
        speeds: dict[str, list[float]] = {name: [] for name in builds}
        for _ in range(args.rounds):
            for name, pythonpath in builds.items():
                speeds[name].append(tokens_per_second(model, args.threads, args.max_tokens, logs[name], pythonpath))
        variants = {name: cpu_variant(logs[name]) for name in builds}
    cpu = this_cpu()
    print(f"{cpu.describe()}; model {Path(model).name}; 1 stream of {args.max_tokens} greedy tokens; "
          f"{args.threads} threads; best of {args.rounds}; host-tuned wheel {wheel}")
    print(f"| {'build':20} | {'CPU backend':28} | {'tok/s':>7} | {'vs host':>7} |")
    print(f"|{'-' * 22}|{'-' * 30}|{'-' * 9}|{'-' * 9}|")
    host_best = max(speeds[list(builds)[1]])
    for name in builds:
        value = max(speeds[name])
        print(f"| {name:20} | {variants[name]:28} | {value:7.1f} | {value / host_best:7.2f} |")
    print(f"(all rounds, tok/s: {', '.join(f'{n}: ' + ' '.join(f'{v:.1f}' for v in s) for n, s in speeds.items())}; "
          f"{platform.machine()})")


if __name__ == "__main__":
    main()
