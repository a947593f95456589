"""The predict fan-out against batching's bound: 8 chats sequential, concurrent, and as one /predict.

    .venv/bin/python bench/fan_out.py [--rounds 5] [--max-tokens 64] [--slots 16] [--ctx-size 16384]

This server and llama-server (bench/llama_server.py) both up at once with the same flags, taking turns
call by call (the first of a turn alternating) so that the machine's drift falls on both alike. Each
round times, on each server, bench/report.py's 8 chats (greedy, ``--max-tokens`` each) sent one after
the other, the same 8 sent at once as 8 requests, and here also the same 8 as the instances of one
``/predict``. Prints the median of each over the rounds, the tokens generated (the same prompts give
about the same answers on both), and the ratios issue 29 asks about: concurrent / sequential (what
batching gains on this machine) for each server and /predict / sequential here. Not a test: timings on
shared machines are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.report import QUESTIONS, chat_body, in_turns  # noqa: E402
from bench.side_by_side import add_server_arguments, servers  # noqa: E402


def chat_tokens(base: str, question: str, max_tokens: int) -> int:
    reply = requests.post(base + "/v1/chat/completions", json=chat_body(question, max_tokens, False), timeout=600)
    reply.raise_for_status()
    return int(reply.json()["usage"]["completion_tokens"])


def sequential(base: str, max_tokens: int) -> int:
    return sum(chat_tokens(base, question, max_tokens) for question in QUESTIONS)


def concurrent(base: str, max_tokens: int) -> int:
    with ThreadPoolExecutor(len(QUESTIONS)) as pool:
        return sum(pool.map(lambda question: chat_tokens(base, question, max_tokens), QUESTIONS))


def predict(base: str, max_tokens: int) -> int:
    instances = [{"@requestFormat": "chatCompletions", **chat_body(q, max_tokens, False)} for q in QUESTIONS]
    reply = requests.post(base + "/predict", json={"instances": instances}, timeout=600)
    reply.raise_for_status()
    return sum(int(prediction["usage"]["completion_tokens"]) for prediction in reply.json()["predictions"])


WAYS: dict[str, Callable[[str, int], int]] = {"sequential": sequential, "concurrent": concurrent, "predict": predict}


def timed(way: Callable[[str, int], int], base: str, max_tokens: int) -> tuple[float, int]:
    started = time.perf_counter()
    tokens = way(base, max_tokens)
    return time.perf_counter() - started, tokens


def measure(bases: dict[str, str], rounds: int, max_tokens: int) -> dict[tuple[str, str], list[tuple[float, int]]]:
    results: dict[tuple[str, str], list[tuple[float, int]]] = {}
    turn = 0
    for base in bases.values():  # warm up: the prompts in the slots, as after any first calls
        sequential(base, 8)
    for _ in range(rounds):
        for way_name, way in WAYS.items():
            for name in in_turns(list(bases), turn):
                if way_name == "predict" and name != "vertex-llama":
                    continue  # llama-server has no /predict
                results.setdefault((name, way_name), []).append(timed(way, bases[name], max_tokens))
            turn += 1
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    add_server_arguments(parser, revisions=False)
    args = parser.parse_args()
    model = str(embedded_model_path())
    with contextlib.ExitStack() as stack:
        bases = servers(stack, args, model, prediction=True)
        results = measure(bases, args.rounds, args.max_tokens)
    print(f"8 chats of up to {args.max_tokens} tokens, {args.rounds} rounds, -np {args.slots} -c {args.ctx_size} "
          f"-t {args.threads}: median s (min-max), tokens generated")
    medians: dict[tuple[str, str], float] = {}
    for (name, way), values in results.items():
        seconds = [value[0] for value in values]
        medians[name, way] = statistics.median(seconds)
        tokens: Any = sorted({value[1] for value in values})
        print(f"  {name:13s} {way:10s} {medians[name, way]:6.2f} ({min(seconds):5.2f}-{max(seconds):5.2f})  "
              f"tokens {tokens}")
    for name in bases:
        print(f"  {name:13s} concurrent / sequential {medians[name, 'concurrent'] / medians[name, 'sequential']:.2f}")
    ours_sequential = medians["vertex-llama", "sequential"]
    print(f"  vertex-llama  predict / sequential {medians['vertex-llama', 'predict'] / ours_sequential:.2f}")
    print(f"  predict / llama-server's concurrent "
          f"{medians['vertex-llama', 'predict'] / medians['llama-server', 'concurrent']:.2f}")


if __name__ == "__main__":
    main()
