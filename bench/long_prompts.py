"""Long prompts: time to the first token of 512, 1,500 and 4,000-token prompts, alone and with 8 streams
decoding beside them, and how long those 8 streams go without a token while the long prompt is
prefilled; this server and llama-server, both up, taking turns at each measurement, with the same flags.

    .venv/bin/python bench/long_prompts.py [--lengths 512,1500,4000] [--runs 3] [--threads 2]

Each server gets ``-np 16 -c 131072`` (8,192 tokens a slot) and ``-t`` threads. For each length:
``alone`` is the median time to the first token of ``--runs`` streamed chats whose prompt is that long and
new (a number at its start defeats every cache); ``beside`` sends the same kind of prompt once 8 streamed
chats (``ignore_eos``, 400 tokens each) are all decoding, and reads its time to the first token and the
8 streams' arrival times: ``stall`` is the longest gap between two chunks of any of the 8 while the long
prompt was waiting for its first token, ``gap`` their median gap outside that window. Both servers take
the prompt in ``n_batch`` chunks (2,048) beside the decoding slots' tokens, one chunk a step. Not a test.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.report import (  # noqa: E402
    LONG_PROMPT_WORDS,
    QUESTIONS,
    content_chunk_times,
    free_port,
    in_turns,
    peer_command,
    running,
)

STREAMS = 8
STREAM_TOKENS = 400


def long_text(tokens: int, seed: int) -> str:
    words = " ".join(LONG_PROMPT_WORDS[(seed + i) % 6] for i in range(tokens // 3))
    return f"{seed} {time.time()}: {words}\nSummarize this."


def chat(base: str, content: str, max_tokens: int, arrivals: list[float] | None = None,
         started: threading.Event | None = None) -> float:
    """Seconds to the first content chunk; every chunk's arrival into ``arrivals``."""
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "ignore_eos": True}
    begin = time.perf_counter()
    first = 0.0
    for now in content_chunk_times(base, body, timeout=900):
        first = first or now - begin
        if arrivals is not None:
            arrivals.append(now)
        if started is not None:
            started.set()
    return first


def beside(base: str, tokens: int, seed: int) -> tuple[float, float, float]:
    """(first token s of the long prompt, the 8 streams' longest gap while it waited, their median gap else)."""
    arrivals: list[list[float]] = [[] for _ in range(STREAMS)]
    started = [threading.Event() for _ in range(STREAMS)]
    with ThreadPoolExecutor(STREAMS) as pool:
        futures = [pool.submit(chat, base, QUESTIONS[i % len(QUESTIONS)], STREAM_TOKENS, arrivals[i], started[i])
                   for i in range(STREAMS)]
        for event in started:
            event.wait(300)
        time.sleep(0.3)  # every stream is decoding
        sent = time.perf_counter()
        ttft = chat(base, long_text(tokens, seed), 1)
        answered = sent + ttft
        for future in futures:
            future.result()
    inside: list[float] = []
    outside: list[float] = []
    for times in arrivals:
        for earlier, later in itertools.pairwise(times):
            (inside if later > sent and earlier < answered else outside).append(later - earlier)
    return ttft, max(inside, default=0.0), statistics.median(outside) if outside else 0.0


def measure(bases: dict[str, str], lengths: list[int], runs: int) -> dict[str, dict[str, float]]:
    """Every row for each server, the servers taking turns at each measurement (the first of a turn
    alternating), so that the machine's drift over the run falls on both alike."""
    names = list(bases)
    rows: dict[str, dict[str, float]] = {name: {} for name in names}
    for name in names:
        chat(bases[name], "warm up", 8)
    for n, tokens in enumerate(lengths):
        alone: dict[str, list[float]] = {name: [] for name in names}
        for run in range(runs):
            for name in in_turns(names, run):
                alone[name].append(chat(bases[name], long_text(tokens, 100 * n + run), 1))
        for name in names:
            rows[name][f"{tokens} alone, first token s"] = statistics.median(alone[name])
        for name in in_turns(names, n):
            ttft, stall, gap = beside(bases[name], tokens, 100 * n + 99)
            rows[name][f"{tokens} beside 8 streams, first token s"] = ttft
            rows[name][f"{tokens} beside 8 streams, streams' longest gap s"] = stall
            rows[name][f"{tokens} beside 8 streams, streams' median gap s"] = gap
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="512,1500,4000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    lengths = [int(value) for value in args.lengths.split(",")]
    model = str(embedded_model_path())
    port = free_port()
    ours = [sys.executable, "-m", "app", "-m", model, "--port", str(port), "-np", "16", "-c", "131072",
            "-t", str(args.threads)]
    peer_port = free_port()
    command, cwd = peer_command("llama-server", model, peer_port, args.threads, context="131072", slots="16")
    # both up at once: an idle server's threads sleep, so each request has the machine to itself
    with running(ours, port, "/health", {}) as server, running(command, peer_port, "/health", {}, cwd=cwd) as peer:
        results = measure({"vertex-llama": server.base, "llama-server": peer.base}, lengths, args.runs)
    print(f"{'row':48} {'ours':>8} {'llama-server':>13} {'ours/llama-server':>18}")
    for name, value in results["vertex-llama"].items():
        theirs = results["llama-server"][name]
        print(f"{name:48} {value:8.3f} {theirs:13.3f} {value / theirs if theirs else 0.0:18.2f}")


if __name__ == "__main__":
    main()
