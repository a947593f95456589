"""Threads that fight: decode speed alone and beside a CPU hog, with as many llama.cpp threads as cores
and with one fewer, this container against llama-server (bench/llama_server.py) with the same flags.

    .venv/bin/python bench/cpu_contention.py [--rounds 3] [--tokens 64]

llama.cpp's CPU threads meet at a barrier after every operation and spin there: when one of them
loses its core to another busy process (a second server, a batch job, a noisy neighbour on a shared
node), every step waits for it to be scheduled again. The hog here is one process spinning on one
core. The table shows what that costs with ``-t`` equal to the cores, what ``--poll 0`` saves
(the threads sleep at a barrier instead of spinning: app/host/cpu_placement.py; llama-server's OpenMP
build ignores its --poll), and that one thread fewer keeps most of the speed: which is why
``--threads`` defaults to the CPUs the container may use (its CPU set held to its cgroup CPU quota,
app/host/cpus.py), not the host's cores. Each server runs alone
(one slot, one stream, greedy); a row is the median decode tokens/s over ``--rounds``. Not a test.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.report import free_port, running  # noqa: E402

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def spin(stop: Any) -> None:
    while not stop.is_set():
        sum(range(10_000))


@contextmanager
def cpu_hog(busy: bool) -> Iterator[None]:
    """One process spinning on one core while the block runs (nothing when ``busy`` is false)."""
    if not busy:
        yield
        return
    stop = multiprocessing.Event()
    process = multiprocessing.Process(target=spin, args=(stop,), daemon=True)
    process.start()
    try:
        time.sleep(0.2)
        yield
    finally:
        stop.set()
        process.join(5)


def decode_speed(base: str, tokens: int) -> float:
    reply = requests.post(base + "/completion", timeout=900, json={
        "prompt": PROMPT, "n_predict": tokens, "temperature": 0, "ignore_eos": True})
    reply.raise_for_status()
    body: dict[str, Any] = reply.json()
    return float(body["timings"]["predicted_per_second"])


def measure(command: list[str], port: int, cwd: Path, busy: bool, rounds: int, tokens: int) -> float:
    with running(command, port, "/health", {}, cwd=cwd) as server:
        decode_speed(server.base, 8)
        with cpu_hog(busy):
            return statistics.median(decode_speed(server.base, tokens) for _ in range(rounds))


def contention_table(rounds: int = 3, tokens: int = 64) -> None:
    from bench.llama_server import llama_server  # builds it once (cached)

    cores = len(os.sched_getaffinity(0))
    model = str(embedded_model_path())
    binary = llama_server()
    fewer = max(1, cores - 1)
    rows: list[tuple[str, list[str], bool]] = [
        (f"alone, -t {cores}", ["-t", str(cores)], False),
        (f"beside a CPU hog, -t {cores}", ["-t", str(cores)], True),
        (f"beside a CPU hog, -t {cores} --poll 0", ["-t", str(cores), "--poll", "0"], True),
        (f"beside a CPU hog, -t {fewer}", ["-t", str(fewer)], True),
    ]
    print(f"CPU contention: {cores} cores, one slot, one stream, {tokens} tokens, median of {rounds}; decode tok/s")
    print("| configuration | vertex-llama | llama-server | ours/llama-server |")
    print("|---|---|---|---|")
    for name, flags, busy in rows:  # one server at a time
        port = free_port()
        ours = measure([sys.executable, "-m", "app", "--model", model, "--port", str(port), "-np", "1", *flags],
                       port, ROOT, busy, rounds, tokens)
        port = free_port()
        theirs = measure([str(binary), "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", "1", *flags,
                          "--no-webui"], port, binary.parent, busy, rounds, tokens)
        print(f"| {name} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    contention_table(args.rounds, args.tokens)


if __name__ == "__main__":
    main()
