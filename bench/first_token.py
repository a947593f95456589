"""Time to first token, this server against llama-server (bench/llama_server.py), in one run.

    .venv/bin/python bench/first_token.py [--runs 40] [--threads 2] [--slots 16] [--ctx-size 16384]
                                          [--revision REV ...] [--ours-only]

Both servers up at once with the same flags (``-np 16 -c 16384 -t 2`` by default, as issue 29 measured),
taking turns request by request so that the machine's drift falls on both alike: three warm-up chats
each, then ``--runs`` streamed chats of 16 tokens (temperature 0) for each case, one at a time:

- ``short``: four different short questions in turn (each a new conversation);
- ``cached prefix``: the same long system prompt (about 600 tokens) with a different question each
  time, so that the prefix comes from the slot's KV cells (or the prompt cache);
- ``same question``: one short question every time, after the warm-up (the measurement issue 29 was
  filed on: bench/report.py's row then), so that all but its last token come from the slot;
- ``one token``: a chat that asks for a single token, so the whole time is the request's overhead and
  its prompt.

``--revision REV`` (repeatable) adds this server as it was at a git revision (a detached worktree of it,
run with this checkout's virtualenv), up at once with the others and taking the same turns: how the
regression of issue 29 was bisected (docs/performance.md, "First token"). A revision older than the
virtualenv's packages takes them from a folder first, ``--revision REV=DIR`` (``pip install --target
DIR gunicorn==23.0.0`` for those before gunicorn 27, 59dc13c).

Prints the median, the 10th and 90th percentiles, the minimum and the maximum of each, and the ratio of
the medians ours / llama-server. The server's own ``timings.prompt_ms`` of each answer is also
collected: the client's time less it is the time outside the prompt's decode (HTTP, parsing, the
template, tokenizing, queueing, the first sampling and the first chunk). Not a test: timings on shared
machines are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.report import in_turns  # noqa: E402
from bench.side_by_side import add_server_arguments, servers  # noqa: E402

SHORT = ["What is the capital of France?", "Name three colours.", "Why is the sky blue?", "Say hello."]
SYSTEM = ("You are a careful assistant for a travel company. " * 60).strip()


def first_token(base: str, messages: list[dict[str, str]], max_tokens: int) -> tuple[float, float]:
    """(seconds to the first content chunk, the server's prompt_ms for the prompt)."""
    session = requests.Session()
    body: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                            "stream": True, "timings_per_token": True}
    started = time.perf_counter()
    first = 0.0
    prompt_ms = 0.0
    with session.post(base + "/v1/chat/completions", json=body, stream=True, timeout=300) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines(decode_unicode=True):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or [{}]
            if not first and choices[0].get("delta", {}).get("content"):
                first = time.perf_counter() - started
            timings = chunk.get("timings") or {}
            prompt_ms = timings.get("prompt_ms", prompt_ms)
    return first, prompt_ms


Case = Callable[[int], tuple[list[dict[str, str]], int]]
CASES: dict[str, Case] = {
    "short": lambda i: ([{"role": "user", "content": SHORT[i % len(SHORT)]}], 16),
    "cached prefix": lambda i: ([{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": SHORT[i % len(SHORT)]}], 16),
    "same question": lambda i: ([{"role": "user", "content": SHORT[0]}], 16),
    "one token": lambda i: ([{"role": "user", "content": SHORT[i % len(SHORT)]}], 1),
}


def measure(bases: dict[str, str], runs: int) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """Each case for each server, the servers taking turns request by request (the first of a turn
    alternating), so that the machine's drift over the run falls on both alike."""
    names = list(bases)
    for name in names:
        for i in range(3):
            first_token(bases[name], *CASES["short"](i))
    results: dict[str, dict[str, tuple[list[float], list[float]]]] = {name: {} for name in names}
    for case_name, case in CASES.items():
        for name in names:
            results[name][case_name] = ([], [])
        for i in range(runs):
            for name in in_turns(names, i):
                seconds, prompt_ms = first_token(bases[name], *case(i))
                results[name][case_name][0].append(seconds * 1000)
                results[name][case_name][1].append(prompt_ms)
    return results


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    tenth, ninetieth = ordered[len(ordered) // 10], ordered[(len(ordered) * 9) // 10]
    return (f"{statistics.median(ordered):6.1f} ({tenth:5.1f}-{ninetieth:5.1f}, min {ordered[0]:5.1f}, "
            f"max {ordered[-1]:6.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40)
    add_server_arguments(parser)
    parser.add_argument("--ours-only", action="store_true", help="measure this server alone")
    args = parser.parse_args()
    model = str(embedded_model_path())
    with contextlib.ExitStack() as stack:
        bases = servers(stack, args, model, peer=not args.ours_only)
        rows = measure(bases, args.runs)
    print(f"time to first token (ms), {args.runs} runs a case, -np {args.slots} -c {args.ctx_size} "
          f"-t {args.threads}: median (10th-90th percentile, min, max); outside: the time less prompt_ms")
    for case in CASES:
        for name, results in rows.items():
            times, prompts = results[case]
            outside = [t - p for t, p in zip(times, prompts, strict=True)]
            print(f"  {case:14s} {name[:13]:13s} {spread(times)}  outside {statistics.median(outside):5.1f}  "
                  f"prompt_ms {statistics.median(prompts):5.1f}")
        if "llama-server" in rows:
            theirs = statistics.median(rows["llama-server"][case][0])
            for name in (name for name in rows if name != "llama-server"):
                mine = statistics.median(rows[name][case][0])
                print(f"  {case:14s} {name[:13]}/llama-server {mine / theirs:.2f}")


if __name__ == "__main__":
    main()
