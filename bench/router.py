"""Router mode against serving the model directly, and against llama-server's own router, in one run.

    .venv/bin/python bench/router.py [--streams 8] [--max-tokens 64] [--light 300] [--threads 2]

For this server and for llama-server (bench/llama_server.py, built from the pinned llama.cpp), one
kind at a time: the model served directly (``-m``) and a router over a folder holding it
(``--models-dir``), with the same flags (``-np 8 -c 8192``), both up and measured in turns (only one
generates at a time), ``--rounds`` times; the medians. Each prints

- tok/s of ``--streams`` concurrent chats of ``--max-tokens`` tokens (ignore_eos), router/direct;
- the time a request adds through the router: the median of ``--light`` sequential ``POST /tokenize``
  requests through the router less the median of as many straight to the model's server;
- cold start: from a request for a model that is not loaded to its first streamed token.

Not a test: timings on shared machines are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.report import free_port, running  # noqa: E402

NAME = "smol"
WARM_REQUESTS = 20


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


def light_median_ms(base: str, count: int, model: str) -> tuple[float, int]:
    """The median of ``count`` sequential /tokenize requests on one keep-alive connection, and how many
    times the server closed that connection under a request (the request is then sent again, not timed)."""
    session = requests.Session()
    body = {"model": model, "content": "Hello, how are you today?"}
    times: list[float] = []
    dropped = 0
    while len(times) < count + WARM_REQUESTS:
        started = time.perf_counter()
        try:
            session.post(base + "/tokenize", json=body, timeout=30).raise_for_status()
        except requests.ConnectionError:
            dropped += 1
            continue
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[WARM_REQUESTS:]), dropped


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
    """Both servers of ``kind`` up at once (only one generates at a time), measured in turns."""
    model = str(embedded_model_path())
    flags = ["-np", "8", "-c", "8192", "-t", str(args.threads)]
    samples: dict[str, list[float]] = {key: [] for key in ("direct_tps", "router_tps", "direct_ms", "router_ms")}
    dropped = 0.0
    with contextlib.ExitStack() as stack:
        bases = {}
        for name, source in (("direct", ["-m", model, "--alias", NAME]), ("router", ["--models-dir", str(folder)])):
            port = free_port()
            command, cwd = server_command(kind, port, flags, source)
            bases[name] = stack.enter_context(running(command, port, "/health", {}, cwd=cwd)).base
        cold = first_token_seconds(bases["router"], NAME)
        for _ in range(args.rounds):
            for name, base in bases.items():
                samples[f"{name}_tps"].append(tokens_per_second(base, args.streams, args.max_tokens, NAME))
                median, closed = light_median_ms(base, args.light, NAME)
                samples[f"{name}_ms"].append(median)
                dropped += closed
    results = {key: statistics.median(values) for key, values in samples.items()}
    return {**results, "cold_s": cold, "dropped": dropped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--light", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="turns of direct and router measurements")
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
          f"{args.light} sequential POST /tokenize; medians of {args.rounds} turns")
    print("| server | tok/s direct | tok/s router | router/direct | /tokenize direct ms | router ms | "
          "added ms | cold request to first token s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['direct_tps']:.1f} | {r['router_tps']:.1f} | {r['router_tps'] / r['direct_tps']:.2f} | "
              f"{r['direct_ms']:.2f} | {r['router_ms']:.2f} | {r['router_ms'] - r['direct_ms']:.2f} | "
              f"{r['cold_s']:.2f} |")
    for name, r in rows.items():
        if r["dropped"]:
            print(f"{name} closed the keep-alive connection under {r['dropped']:.0f} /tokenize requests "
                  "(sent again, not timed)")
    if "llama-server" in rows:
        ours, peer = rows["vertex-llama"], rows["llama-server"]
        print(f"ours/llama-server: router tok/s {ours['router_tps'] / peer['router_tps']:.2f}, added ms "
              f"{ours['router_ms'] - ours['direct_ms']:.2f} vs {peer['router_ms'] - peer['direct_ms']:.2f}, cold "
              f"start {ours['cold_s'] / peer['cold_s']:.2f}")


if __name__ == "__main__":
    main()
