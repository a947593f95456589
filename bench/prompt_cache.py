"""The prompt cache (--cache-ram): time to first token with it off and on, same server otherwise.

    .venv/bin/python bench/prompt_cache.py [--system-tokens 1500] [--clients 16] [--rounds 3]

Two workloads on 4 slots, each run with ``--cache-ram 0`` and with ``--cache-ram 1024``:

- **shared system prompt**: 16 clients, each a conversation that starts with the same long system
  prompt and grows by a question and its answer every round; four at a time (one per slot).
- **distinct documents**: 8 long documents (as long as the system prompt), each asked about in
  every round; more prompts than slots, so a document's slot has been taken by another in between.

Each request streams; the table gives the median time to first token per workload. ``bench/report.py``
prints this table after its own. Not a test: timings on shared machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import free_port, running  # noqa: E402

SLOTS = 4
WORDS = ("parcel", "route", "depot", "invoice", "customs", "pallet", "courier", "refund", "address", "weight",
         "express", "station", "label", "signature", "damage", "warehouse")


def long_text(seed: int, tokens: int) -> str:
    """About ``tokens`` tokens of policy-like text, different for each seed."""
    words = [WORDS[(seed * 7 + i * (seed + 3)) % len(WORDS)] for i in range(tokens)]
    return "Policy " + str(seed) + ": " + " ".join(words) + "."


def first_token_seconds(base: str, messages: list[dict[str, str]]) -> tuple[float, str]:
    body = {"messages": messages, "max_tokens": 8, "temperature": 0, "stream": True}
    started = time.perf_counter()
    first, text = 0.0, ""
    with requests.post(base + "/v1/chat/completions", json=body, stream=True, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines(decode_unicode=True):
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            piece = choices[0].get("delta", {}).get("content") or ""
            if piece and not first:
                first = time.perf_counter() - started
            text += piece
    return first, text


def shared_system_prompt(base: str, system: str, clients: int, rounds: int) -> list[float]:
    histories: list[list[dict[str, str]]] = [[{"role": "system", "content": system}] for _ in range(clients)]
    times: list[float] = []

    def turn(client: int, number: int) -> float:
        history = histories[client]
        history.append({"role": "user", "content": f"Client {client}, question {number}: where is my parcel?"})
        seconds, answer = first_token_seconds(base, history)
        history.append({"role": "assistant", "content": answer})
        return seconds

    with ThreadPoolExecutor(SLOTS) as pool:
        for number in range(rounds):
            times.extend(pool.map(lambda client, n=number: turn(client, n), range(clients)))
    return times


def distinct_documents(base: str, tokens: int, rounds: int, documents: int = 2 * SLOTS) -> list[float]:
    texts = [long_text(100 + seed, tokens) for seed in range(documents)]
    times: list[float] = []
    with ThreadPoolExecutor(SLOTS) as pool:
        for number in range(rounds):
            asks = [[{"role": "system", "content": text}, {"role": "user", "content": f"Question {number}?"}]
                    for text in texts]
            times.extend(pool.map(lambda messages: first_token_seconds(base, messages)[0], asks))
    return times


def measure(cache_mib: int, system_tokens: int, clients: int, rounds: int, threads: int) -> dict[str, Any]:
    port = free_port()
    context = SLOTS * (system_tokens + 200 + 60 * rounds) * 2
    command = [sys.executable, "-m", "app", "--port", str(port), "-np", str(SLOTS), "-c", str(context),
               "-t", str(threads), "--cache-ram", str(cache_mib), "--metrics"]
    with running(command, port, "/health", {}) as server:
        first_token_seconds(server.base, [{"role": "user", "content": "warm up"}])
        system = long_text(1, system_tokens)
        shared = shared_system_prompt(server.base, system, clients, rounds)
        documents = distinct_documents(server.base, system_tokens, rounds)
        metrics = requests.get(server.base + "/metrics", timeout=10).text
        restores = next(float(line.split()[1]) for line in metrics.splitlines()
                        if line.startswith("llamacpp:prompt_cache_restores_total "))
    return {"shared": statistics.median(shared), "documents": statistics.median(documents), "restores": restores}


def prompt_cache_table(system_tokens: int = 1500, clients: int = 16, rounds: int = 3, threads: int = 2) -> None:
    off = measure(0, system_tokens, clients, rounds, threads)
    on = measure(1024, system_tokens, clients, rounds, threads)
    print(f"prompt cache: {SLOTS} slots, {system_tokens}-token system prompt or documents, {clients} clients, "
          f"{rounds} rounds, {threads} threads; median time to first token, s")
    print(f"| {'workload':36} | {'--cache-ram 0':>13} | {'--cache-ram 1024':>16} | {'on/off':>6} |")
    print(f"|{'-' * 38}|{'-' * 15}|{'-' * 18}|{'-' * 8}|")
    for key, name in (("shared", f"shared system prompt, {clients} clients"),
                      ("documents", f"{2 * SLOTS} distinct documents")):
        print(f"| {name:36} | {off[key]:13.3f} | {on[key]:16.3f} | {on[key] / off[key]:6.2f} |")
    print(f"(restores from the cache: {off['restores']:.0f} off, {on['restores']:.0f} on)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system-tokens", type=int, default=1500)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    prompt_cache_table(args.system_tokens, args.clients, args.rounds, args.threads)


if __name__ == "__main__":
    main()
