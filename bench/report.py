"""The benchmark report: this container against llama-server (built from the llama.cpp the pinned
llama-cpp-python vendors: bench/llama_server.py) and llama-cpp-python's own server, same model, one run.

    .venv/bin/python bench/report.py [--max-tokens 64] [--threads 2] [--rounds 1] [--peer NAME ...]

Prints one table: time to healthy, time to first token (a short prompt, four in turn, and a cached
600-token prefix: bench/first_token.py's cases, median of 20), aggregate generated tokens/s at 1, 4, 8,
16, 32 and 64 concurrent streams, /predict with 8 instances against 8 sequential calls and 8
concurrent ones (and how many of a 128-instance /predict are answered), requests/s of the light
requests (/health, /props, /tokenize, /detokenize: no decoding), the health check's p99 latency
while 32 streams run (one read slowly), the engine thread's own time per decode step at each stream
count (/metrics llamacpp:step_host_seconds), and peak memory (RSS of the server's processes), with
ratios ours/theirs for each peer; then the prompt cache's table (bench/prompt_cache.py: time to
first token with --cache-ram off and on) and speculative decoding's (bench/speculative.py: an edit
task with n-gram drafts off and on, and a self-draft, against llama-server) and CPU contention's
(bench/cpu_contention.py: decode speed beside a CPU hog, -t cores and cores - 1).
The servers are up together and take turns at each row (an idle server's threads sleep), so that the
machine's drift over the run falls on all alike. Not a test: timings on shared machines are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.light_requests import LLAMA_SERVER_LIGHT, TEXT, TOKENS, LightRequest, light_rps  # noqa: E402

QUESTIONS = [
    "Write a short poem about the sea.", "Explain what a CPU does.", "Give me three tips for cooking.",
    "Describe a sunset over the mountains.", "What are the benefits of walking?", "Tell a story about a cat.",
    "How does a rainbow form?", "Describe your ideal weekend.",
]
STREAMS = (1, 4, 8, 16, 32, 64)
FIRST_TOKEN_RUNS = 20  # streamed chats a first-token row's median is taken over (bench/first_token.py's cases)
SLOTS, CONTEXT = "64", "65536"  # every server: a slot per stream, 1,024 tokens each


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree_rss_bytes(pid: int) -> int:
    """RSS of a process and its children (gunicorn's master and worker)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
            pending.extend(int(child) for child in children)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


@dataclass
class Running:
    base: str
    process: subprocess.Popen[bytes]
    healthy_s: float
    peak_rss: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)

    def watch_memory(self) -> None:
        while not self.stopped.wait(0.2):
            self.peak_rss = max(self.peak_rss, tree_rss_bytes(self.process.pid))


@contextmanager
def running(command: list[str], port: int, health: str, env: dict[str, str],
            log: Path | None = None, cwd: Path = ROOT, poll_seconds: float = 0.02) -> Iterator[Running]:
    """A server started from ``command`` and healthy (``health`` polled every ``poll_seconds``); its
    output goes to ``log`` (else nowhere)."""
    started = time.perf_counter()
    with log.open("wb") if log else open(os.devnull, "wb") as output:
        process = subprocess.Popen(command, cwd=cwd, env={**os.environ, **env}, stdout=output,
                                   stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{command[2]} exited with {process.returncode}")
        try:
            if requests.get(base + health, timeout=5).status_code == 200:
                break
        except requests.ConnectionError:
            pass
        time.sleep(poll_seconds)
    server = Running(base, process, time.perf_counter() - started)
    watcher = threading.Thread(target=server.watch_memory, daemon=True)
    watcher.start()
    try:
        yield server
    finally:
        server.stopped.set()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()


def llama_lib_dir() -> Path:
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "lib"


def chat_body(question: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": question}], "max_tokens": max_tokens,
            "temperature": 0, "stream": stream}


def content_chunk_times(base: str, body: dict[str, Any], timeout: float = 600) -> Iterator[float]:
    """When each content chunk of a streamed chat arrived (``time.perf_counter``)."""
    with requests.post(base + "/v1/chat/completions", json=body, stream=True, timeout=timeout) as response:
        response.raise_for_status()
        for line in response.iter_lines(decode_unicode=True):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                yield time.perf_counter()


def stream_chat(base: str, question: str, max_tokens: int) -> tuple[int, float]:
    """(content chunks received, seconds to the first one)."""
    started = time.perf_counter()
    times = list(content_chunk_times(base, chat_body(question, max_tokens, True)))
    return len(times), times[0] - started if times else 0.0


def streams_tokens_per_second(base: str, n: int, max_tokens: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda i: stream_chat(base, QUESTIONS[i % 8], max_tokens), range(n)))
    return sum(chunks for chunks, _ in results) / (time.perf_counter() - started)


def one_chat(base: str, question: str, max_tokens: int) -> None:
    requests.post(base + "/v1/chat/completions", json=chat_body(question, max_tokens, False),
                  timeout=600).raise_for_status()


def sequential_seconds(base: str, max_tokens: int) -> float:
    started = time.perf_counter()
    for question in QUESTIONS:
        one_chat(base, question, max_tokens)
    return time.perf_counter() - started


def concurrent_seconds(base: str, max_tokens: int) -> float:
    """The 8 chats of ``sequential_seconds`` sent at once, each its own request: what batching gives
    on this machine, the bound of a /predict that carries them as instances."""
    started = time.perf_counter()
    with ThreadPoolExecutor(len(QUESTIONS)) as pool:
        list(pool.map(lambda question: one_chat(base, question, max_tokens), QUESTIONS))
    return time.perf_counter() - started


def predict_seconds(base: str, max_tokens: int) -> float:
    instances = [{"@requestFormat": "chatCompletions", **chat_body(q, max_tokens, False)} for q in QUESTIONS]
    started = time.perf_counter()
    response = requests.post(base + "/predict", json={"instances": instances}, timeout=600)
    response.raise_for_status()
    return time.perf_counter() - started


def predict_128_answered(base: str) -> float:
    """Of a /predict with 128 short chat instances (more than the slots and the queue), how many
    are real predictions (the rest would be refusals inside a 200)."""
    instances = [{"@requestFormat": "chatCompletions", **chat_body(QUESTIONS[n % 8], 4, False)} for n in range(128)]
    response = requests.post(base + "/predict", json={"instances": instances}, timeout=900)
    response.raise_for_status()
    return float(sum("error" not in prediction for prediction in response.json()["predictions"]))


def health_p99_under_load(base: str, health: str, max_tokens: int, streams: int = 32) -> float:
    """p99 latency (ms) of the health check while ``streams`` long streams run, one read slowly."""
    def slow_stream() -> None:
        with requests.post(base + "/v1/chat/completions", json=chat_body(QUESTIONS[0], max_tokens, True),
                           stream=True, timeout=600) as response:
            for _ in response.iter_lines():
                time.sleep(0.2)

    with ThreadPoolExecutor(streams) as pool:
        running: list[Future[Any]] = [pool.submit(slow_stream)]
        running += [pool.submit(stream_chat, base, QUESTIONS[i % 8], max_tokens) for i in range(1, streams)]
        time.sleep(1.0)
        latencies: list[float] = []
        while not all(future.done() for future in running[1:]):
            started = time.perf_counter()
            requests.get(base + health, timeout=60)
            latencies.append((time.perf_counter() - started) * 1000.0)
            time.sleep(0.05)
    return statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]


def step_host_seconds(base: str) -> tuple[float, float]:
    """(steps, seconds) of llamacpp:step_host_seconds: the engine thread's own time per decode step."""
    text = requests.get(base + "/metrics", timeout=10).text
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith(("llamacpp:step_host_seconds_count", "llamacpp:step_host_seconds_sum"))}
    return values.get("llamacpp:step_host_seconds_count", 0.0), values.get("llamacpp:step_host_seconds_sum", 0.0)


def best(rounds: int, measure: Callable[[], float], higher_is_better: bool) -> float:
    values = [measure() for _ in range(rounds)]
    return max(values) if higher_is_better else min(values)


@dataclass(frozen=True)
class Peer:
    """How the benchmark talks to a server: its health path and its light requests (those it has)."""

    name: str
    health: str
    light: dict[str, LightRequest]


OURS = Peer("vertex-llama", "/health", LLAMA_SERVER_LIGHT)
PEERS = {"llama-server": Peer("llama-server", "/health", LLAMA_SERVER_LIGHT),
         "llama_cpp.server": Peer("llama_cpp.server", "/v1/models", {
             "health": LightRequest("/v1/models"),
             "tokenize": LightRequest("/extras/tokenize", {"input": TEXT}),
             "detokenize": LightRequest("/extras/detokenize", {"tokens": TOKENS})})}


LONG_PROMPT_WORDS = ("the river", "a lantern", "seven birds", "an old map", "the harbour", "a quiet street")


def long_prompt_ttft(base: str, tokens: int) -> float:
    """Seconds to the first token of a chat whose prompt is about ``tokens`` tokens, never seen before
    (a number at its start defeats the prompt cache); the median of three."""
    def once(seed: int) -> float:
        text = f"{seed} {time.time()}: " + " ".join(LONG_PROMPT_WORDS[(seed + i) % 6] for i in range(tokens // 3))
        return stream_chat(base, text + "\nSummarize this.", 4)[1]
    return statistics.median(once(seed) for seed in range(3))


Row = Callable[[Running, Peer], dict[str, float]]


def rows(max_tokens: int, rounds: int, streams: tuple[int, ...], long_prompt: int) -> list[Row]:
    """The table's measurements, each taken on one server at a time (a row's values for that server)."""
    from bench.first_token import CASES, first_token  # it imports this module's helpers

    def first_tokens(server: Running, peer: Peer) -> dict[str, float]:
        values = {}
        for case, label in (("short", "short"), ("cached prefix", "cached")):
            values[f"time to first token, {label}, ms (lower)"] = statistics.median(
                first_token(server.base, *CASES[case](i))[0] * 1000 for i in range(FIRST_TOKEN_RUNS))
        if long_prompt:
            values[f"time to first token, {long_prompt}-token prompt, s"] = long_prompt_ttft(server.base, long_prompt)
        return values

    def stream_row(n: int) -> Row:
        def row(server: Running, peer: Peer) -> dict[str, float]:
            ours = peer is OURS
            before = step_host_seconds(server.base) if ours else (0.0, 0.0)
            values = {f"tok/s, {n} streams (higher: better)": best(
                rounds, lambda: streams_tokens_per_second(server.base, n, max_tokens), True)}
            if ours:  # the engine thread's own time a step (batching, sampling, text, events), at this load
                steps, seconds = (after - earlier for after, earlier in zip(step_host_seconds(server.base), before,
                                                                             strict=True))
                values[f"engine's own ms a step, {n} streams"] = 1000 * seconds / steps if steps else 0.0
            return values
        return row

    def calls(server: Running, peer: Peer) -> dict[str, float]:
        base = server.base
        values = {"8 sequential calls, s (lower: better)": best(rounds, lambda: sequential_seconds(base, max_tokens),
                                                                False),
                  "8 concurrent calls, s (lower: better)": best(rounds, lambda: concurrent_seconds(base, max_tokens),
                                                                False)}
        if peer is OURS:
            values["/predict with 8 instances, s"] = best(rounds, lambda: predict_seconds(base, max_tokens), False)
            values["/predict of 128: predictions answered"] = predict_128_answered(base)
        return values

    def light(server: Running, peer: Peer) -> dict[str, float]:
        port = int(server.base.rsplit(":", 1)[1])
        return {f"{name}, requests/s (higher: better)": best(rounds, functools.partial(light_rps, port, request), True)
                for name, request in peer.light.items()}  # raw keep-alive clients (bench/light_requests.py)

    def health(server: Running, peer: Peer) -> dict[str, float]:
        return {"health p99 under 32 streams, ms (lower)": health_p99_under_load(server.base, peer.health,
                                                                                 max_tokens)}

    return [first_tokens, *(stream_row(n) for n in streams), calls, light, health]


def in_turns(names: list[str], turn: int) -> list[str]:
    """The servers' order at turn ``turn``: each goes first in its turn, so that none always measures right
    after another's load (every benchmark that compares servers up together takes them this way)."""
    first = turn % len(names)
    return names[first:] + names[:first]


def measure(servers: dict[str, tuple[Running, Peer]], table: list[Row]) -> dict[str, dict[str, float]]:
    """Each row on every server, the servers taking turns (the first of a turn alternating), so that the
    machine's drift over the run falls on all alike; an idle server's threads sleep meanwhile."""
    names = list(servers)
    results: dict[str, dict[str, float]] = {}
    for name, (server, _) in servers.items():
        one_chat(server.base, "warm up", 8)
        results[name] = {"time to healthy, s (lower: better)": server.healthy_s}
    for index, row in enumerate(table):
        for name in in_turns(names, index):
            server, peer = servers[name]
            results[name].update(row(server, peer))
    for name, (server, _) in servers.items():
        results[name]["peak memory, MiB (lower: better)"] = server.peak_rss / (1 << 20)
    return results


def peer_command(name: str, model: str, port: int, threads: int, binary: Path | None = None,
                 extra: tuple[str, ...] = (), context: str = CONTEXT, slots: str = SLOTS) -> tuple[list[str], Path]:
    """(command, working directory) of a peer server on ``port``, with the slots and context ours gets;
    ``binary`` is a llama-server already built (a CUDA one: scripts/gpu-check.sh), ``extra`` more flags."""
    if name == "llama-server":
        from bench.llama_server import llama_server  # builds it once (cached)

        binary = binary or llama_server()
        return ([str(binary), "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", slots, "-c", context,
                 "-t", str(threads), "--no-webui", *extra], binary.parent)
    # With runtime CPU dispatch, llama-cpp-python's own Llama class finds ggml's backends only beside
    # the executable or in the working directory: run it from the wheel's library directory.
    return ([sys.executable, "-m", "llama_cpp.server", "--model", model, "--port", str(port), "--host", "127.0.0.1",
             "--n_ctx", "2048", "--n_threads", str(threads), "--n_threads_batch", str(threads),
             "--interrupt_requests", "False"], llama_lib_dir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer", action="append", choices=sorted(PEERS),
                        help="a server to compare against, repeatable (default: both)")
    parser.add_argument("--streams", default=",".join(map(str, STREAMS)), help="stream counts, comma-separated")
    parser.add_argument("--gpu-layers", default=None, help="-ngl for every server (e.g. all, on a GPU machine)")
    parser.add_argument("--llama-server-bin", type=Path, default=None,
                        help="a llama-server already built (default: built from the pinned llama.cpp, CPU)")
    parser.add_argument("--long-prompt", type=int, default=0, help="also time the first token of a prompt this long")
    parser.add_argument("--ctx-size", default=CONTEXT, help=f"context of every server, all slots (default {CONTEXT})")
    parser.add_argument("--only-generation", action="store_true",
                        help="only the time and throughput rows, no tables after (scripts/gpu-check.sh)")
    args = parser.parse_args()
    model = str(embedded_model_path())
    peers = args.peer or sorted(PEERS)
    streams = tuple(int(n) for n in args.streams.split(","))
    extra = ("-ngl", args.gpu_layers) if args.gpu_layers else ()

    with contextlib.ExitStack() as stack:  # started one after another (each time to healthy alone), then all up
        port = free_port()
        ours_cmd = [sys.executable, "-m", "app", "--model", model, "--port", str(port), "-np", SLOTS, "-c",
                    args.ctx_size, "-t", str(args.threads), *extra]
        servers = {"vertex-llama": (stack.enter_context(running(
            ours_cmd, port, "/health", {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port)})), OURS)}
        for name in peers:
            port = free_port()
            command, cwd = peer_command(name, model, port, args.threads, args.llama_server_bin, extra, args.ctx_size)
            servers[name] = (stack.enter_context(running(command, port, PEERS[name].health, {}, cwd=cwd)),
                             PEERS[name])
        measured = measure(servers, rows(args.max_tokens, args.rounds, streams, args.long_prompt))
    ours = measured.pop("vertex-llama")
    theirs = measured

    print(f"model {Path(model).name}; {args.max_tokens} tokens a request; {args.threads} threads; "
          f"{os.cpu_count()} cores; {platform.machine()}; best of {args.rounds}")
    cells = ["measure".ljust(40), "vertex-llama".rjust(12)]
    for name in peers:
        cells += [name.rjust(16), f"ours/{name}".rjust(21)]
    print("| " + " | ".join(cells) + " |")
    print("|" + "|".join("-" * (len(cell) + 2) for cell in cells) + "|")
    for key, value in ours.items():
        row = [key.ljust(40), f"{value:12.2f}"]
        for name in peers:
            peer = theirs[name].get(key)
            row.append(f"{peer:16.2f}" if peer is not None else "-".rjust(16))
            row.append(f"{value / peer:21.2f}" if peer else "-".rjust(21))
        print("| " + " | ".join(row) + " |")
    predict = ours["/predict with 8 instances, s"]
    for name, results in {"vertex-llama": ours, **theirs}.items():
        sequential = results["8 sequential calls, s (lower: better)"]
        concurrent = results["8 concurrent calls, s (lower: better)"]
        print(f"our /predict(8) / {name}'s 8 sequential calls = {predict:.2f} / {sequential:.2f} = "
              f"{predict / sequential:.2f}; {name}'s 8 concurrent / 8 sequential calls (batching's bound "
              f"on this machine) = {concurrent / sequential:.2f}")
    concurrent = ours["8 concurrent calls, s (lower: better)"]
    print(f"our /predict(8) / our 8 concurrent calls (the fan-out's own cost) = {predict / concurrent:.2f}")
    if args.only_generation:
        return
    print()
    from bench.prompt_cache import prompt_cache_table  # it imports this module
    prompt_cache_table(threads=args.threads)
    print()
    from bench.speculative import speculative_table  # it imports this module
    speculative_table(threads=args.threads, rounds=max(args.rounds, 3))
    print()
    from bench.cpu_contention import contention_table  # it imports this module
    contention_table(rounds=max(args.rounds, 3))

if __name__ == "__main__":
    main()
