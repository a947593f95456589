"""Benchmark: this container against llama-cpp-python's own server, on the same model, in one run.

    .venv/bin/python bench/throughput.py [--max-tokens 64] [--rounds 2]

Prints aggregate generated tokens/s for 1, 4 and 8 concurrent chat requests, and the wall time of
one /predict with 8 instances against 8 sequential requests, with ratios ours/theirs. The two
servers run one after the other (never together), each with 2 CPU threads, so they do not compete
for the cores. Not a test: timings on shared machines are noisy; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_files import embedded_model_path  # noqa: E402

QUESTIONS = [
    "Write a short poem about the sea.",
    "Explain what a CPU does.",
    "Give me three tips for learning to cook.",
    "Describe a sunset over the mountains.",
    "What are the benefits of walking every day?",
    "Tell me a story about a brave cat.",
    "How does a rainbow form?",
    "Describe your ideal weekend.",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Target:
    name: str
    base: str
    has_predict: bool


def wait_healthy(url: str, process: subprocess.Popen[bytes], path: str) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < 300:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode}")
        try:
            if requests.get(url + path, timeout=5).status_code == 200:
                return time.perf_counter() - started
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not become healthy")


@contextmanager
def running(command: list[str], port: int, health_path: str, env: dict[str, str]) -> Iterator[str]:
    process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, process, health_path)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()


def chat_body(question: str, max_tokens: int) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}],
            "max_tokens": max_tokens, "temperature": 0}


def one_chat(base: str, question: str, max_tokens: int) -> int:
    response = requests.post(base + "/v1/chat/completions", json=chat_body(question, max_tokens), timeout=600)
    response.raise_for_status()
    return int(response.json()["usage"]["completion_tokens"])


def concurrent_tokens_per_second(base: str, concurrency: int, max_tokens: int) -> float:
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(concurrency)]
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(lambda q: one_chat(base, q, max_tokens), questions))
    return tokens / (time.perf_counter() - started)


def sequential_seconds(base: str, max_tokens: int) -> float:
    started = time.perf_counter()
    for question in QUESTIONS:
        one_chat(base, question, max_tokens)
    return time.perf_counter() - started


def predict_seconds(base: str, max_tokens: int) -> float:
    instances = [{"@requestFormat": "chatCompletions", **chat_body(q, max_tokens)} for q in QUESTIONS]
    started = time.perf_counter()
    response = requests.post(base + "/predict", json={"instances": instances}, timeout=600)
    response.raise_for_status()
    assert len(response.json()["predictions"]) == len(QUESTIONS)
    return time.perf_counter() - started


def best(rounds: int, measure: Callable[[], float], higher_is_better: bool) -> float:
    values = [measure() for _ in range(rounds)]
    return max(values) if higher_is_better else min(values)


def measure(base: str, has_predict: bool, max_tokens: int, rounds: int) -> dict[str, float]:
    one_chat(base, "warm up", 8)
    results = {}
    for n in (1, 4, 8):
        results[f"tok/s, {n} concurrent (higher: better)"] = best(
            rounds, lambda n=n: concurrent_tokens_per_second(base, n, max_tokens), True  # type: ignore[misc]
        )
    results["8 sequential, s (lower: better)"] = best(rounds, lambda: sequential_seconds(base, max_tokens), False)
    if has_predict:
        results["/predict of 8 instances, s"] = best(rounds, lambda: predict_seconds(base, max_tokens), False)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    model = str(embedded_model_path())

    ours_port = free_port()
    ours_cmd = [sys.executable, "-m", "app", "--model", model, "--port", str(ours_port), "-np", "8",
                "-c", "8192", "-t", str(args.threads)]
    with running(ours_cmd, ours_port, "/health", {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(ours_port)}) as base:
        ours = measure(base, True, args.max_tokens, args.rounds)

    theirs_port = free_port()
    theirs_cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--port", str(theirs_port),
                  "--host", "127.0.0.1", "--n_ctx", "2048", "--n_threads", str(args.threads),
                  "--n_threads_batch", str(args.threads), "--interrupt_requests", "False"]
    with running(theirs_cmd, theirs_port, "/v1/models", {}) as base:
        theirs = measure(base, False, args.max_tokens, args.rounds)

    print(f"model: {Path(model).name}; max_tokens {args.max_tokens}; best of {args.rounds}; "
          f"{args.threads} threads; {os.cpu_count()} cores")
    print(f"{'measure':38} {'vertex-llama':>13} {'llama_cpp.server':>17} {'ours/theirs':>12}")
    for key, value in ours.items():
        peer = theirs.get(key)
        ratio = f"{value / peer:.2f}" if peer else "-"
        print(f"{key:38} {value:13.2f} {peer if peer is not None else float('nan'):17.2f} {ratio:>12}")
    predict = ours["/predict of 8 instances, s"]
    sequential = "8 sequential, s (lower: better)"
    print(f"{'/predict(8) vs their 8 sequential':38} {predict:13.2f} {theirs[sequential]:17.2f} "
          f"{theirs[sequential] / predict:11.2f}x faster")
    print(f"{'/predict(8) vs our 8 sequential':38} {predict:13.2f} {ours[sequential]:17.2f} "
          f"{ours[sequential] / predict:11.2f}x faster")


if __name__ == "__main__":
    main()
