"""Router mode against serving the model directly, and against llama-server's own router, in one run.

    .venv/bin/python bench/router.py [--streams 8] [--max-tokens 64] [--light 300] [--threads 2]

For this server and for llama-server (bench/llama_server.py, built from the pinned llama.cpp), one
server at a time: the model served directly (``-m``), then a router over a folder holding it
(``--models-dir``), with the same flags (``-np 8 -c 8192``). Each prints

- tok/s of ``--streams`` concurrent chats of ``--max-tokens`` tokens (ignore_eos), router/direct;
- the time a request adds through the router: the median of ``--light`` sequential ``POST /tokenize``
  requests through the router less the median of as many straight to the model's server;
- cold start: from a request for a model that is not loaded to its first streamed token.

Not a test: timings on shared machines are noisy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.report import free_port, running  # noqa: E402

NAME = "smol"


def server_command(kind: str, port: int, flags: list[str], source: list[str]) -> tuple[list[str], Path]:
    if kind == "ours":
        return [sys.executable, "-m", "app", "--port", str(port), *flags, *source], ROOT
    from bench.llama_server import llama_server

    binary = llama_server()
    return [str(binary), "--host", "127.0.0.1", "--port", str(port), "--no-webui", *flags, *source], binary.parent


def tokens_per_second(base: str, streams: int, max_tokens: int, model: str) -> float:
    counts: list[int] = []

    def one(index: int) -> None:
        reply = requests.post(base + "/v1/chat/completions", timeout=600, json={
            "model": model, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0,
            "messages": [{"role": "user", "content": f"Tell story number {index}"}]})
        reply.raise_for_status()
        counts.append(reply.json()["usage"]["completion_tokens"])

    one(0)  # warm
    counts.clear()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - started)


def light_median_ms(base: str, count: int, model: str) -> float:
    session = requests.Session()
    body = {"model": model, "content": "Hello, how are you today?"}
    for _ in range(20):
        session.post(base + "/tokenize", json=body, timeout=30).raise_for_status()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        session.post(base + "/tokenize", json=body, timeout=30).raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def first_token_seconds(base: str, model: str) -> float:
    started = time.perf_counter()
    with requests.post(base + "/v1/chat/completions", stream=True, timeout=600, json={
            "model": model, "stream": True, "max_tokens": 4,
            "messages": [{"role": "user", "content": "Hi"}]}) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if line.startswith(b"data: ") and b'"content":"' in line:
                return time.perf_counter() - started
    raise RuntimeError("no token came")


def measure(kind: str, args: argparse.Namespace, folder: Path) -> dict[str, float]:
    model = str(embedded_model_path())
    flags = ["-np", "8", "-c", "8192", "-t", str(args.threads)]
    results: dict[str, float] = {}

    def with_server(source: list[str], work: Callable[[str], None]) -> None:
        port = free_port()
        command, cwd = server_command(kind, port, flags, source)
        with running(command, port, "/health", {}, cwd=cwd) as server:
            work(server.base)

    def direct(base: str) -> None:
        results["direct_tps"] = tokens_per_second(base, args.streams, args.max_tokens, NAME)
        results["direct_ms"] = light_median_ms(base, args.light, NAME)

    def routed(base: str) -> None:
        results["cold_s"] = first_token_seconds(base, NAME)
        results["router_tps"] = tokens_per_second(base, args.streams, args.max_tokens, NAME)
        results["router_ms"] = light_median_ms(base, args.light, NAME)

    with_server(["-m", model, "--alias", NAME], direct)
    with_server(["--models-dir", str(folder)], routed)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--light", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                        help="also measure llama-server's router (default: on)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / f"{NAME}.gguf").symlink_to(embedded_model_path())
        rows = {"vertex-llama": measure("ours", args, folder)}
        if args.peer:
            rows["llama-server"] = measure("llama-server", args, folder)
    print(f"router mode: {args.streams} streams x {args.max_tokens} tokens, -np 8 -c 8192 -t {args.threads}; "
          f"{args.light} sequential POST /tokenize")
    print("| server | tok/s direct | tok/s router | router/direct | /tokenize direct ms | router ms | "
          "added ms | cold request to first token s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['direct_tps']:.1f} | {r['router_tps']:.1f} | {r['router_tps'] / r['direct_tps']:.2f} | "
              f"{r['direct_ms']:.2f} | {r['router_ms']:.2f} | {r['router_ms'] - r['direct_ms']:.2f} | "
              f"{r['cold_s']:.2f} |")
    if "llama-server" in rows:
        ours, peer = rows["vertex-llama"], rows["llama-server"]
        print(f"ours/llama-server: router tok/s {ours['router_tps'] / peer['router_tps']:.2f}, added ms "
              f"{ours['router_ms'] - ours['direct_ms']:.2f} vs {peer['router_ms'] - peer['direct_ms']:.2f}, cold "
              f"start {ours['cold_s'] / peer['cold_s']:.2f}")


if __name__ == "__main__":
    main()
