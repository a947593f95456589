"""Speculative decoding: an edit task with n-gram drafts off and on, and the embedded model as its own
draft model, this container against llama-server (bench/llama_server.py) with the same flags.

    .venv/bin/python bench/speculative.py [--threads 2] [--rounds 3] [--tokens 256]

The edit task: the prompt holds a text of about 300 tokens and the start of it again; the answer repeats
the text, which n-gram drafts (``--spec-type ngram-simple``) copy from the prompt. The self-draft
row (``-md`` the same model, ``--spec-type draft-simple``) shows what verification costs when the
draft model is as slow as the target: its drafts are right, but each costs a decode of its own.
Each configuration is one server, one slot, started alone; a row is the median over ``--rounds`` of
the decode speed the server reports (``timings.predicted_per_second``), with the drafts it verified and
kept. ``bench/report.py`` prints this table after its own. Not a test: timings are noisy here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.report import free_port, running  # noqa: E402

TEXT = (
    "The harbour town wakes before the sun. Fishermen untie their boats, check the nets they mended the "
    "night before, and steer out past the breakwater while the gulls circle overhead. In the bakery on the "
    "corner, the first loaves come out of the oven at five, and the smell drifts down the narrow streets to "
    "the market square, where traders are setting up their stalls. By seven the square is full: farmers "
    "from the valley sell cheese, honey and apples; a woman from the hills sells wool she spun herself; an "
    "old man repairs clocks at a folding table and never seems to finish a single one. Children run "
    "between the stalls on their way to school, and the church bell rings the hour a little late, as it "
    "has for as long as anyone can remember. At noon the boats return. The catch is weighed on the quay, "
    "sold to the restaurants and the fish merchants, and packed in ice for the train to the city. In the "
    "afternoon the town grows quiet. Shopkeepers close their shutters against the heat, cats sleep in the "
    "shade of the fountain, and the only sound is the water slapping against the harbour wall. When the "
    "evening comes, the cafés fill with people who have known each other all their lives. They talk about "
    "the weather, the price of fish, and the new road that the council has promised for twenty years. "
    "Then the lights go out one by one, and the harbour town sleeps until the boats leave again."
)
PROMPT = f"{TEXT}\n\n{TEXT[:TEXT.index(' check')]}"  # the text, then its start again: the model copies it
NGRAM = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "12", "--spec-ngram-simple-size-m", "48"]
CONFIGS: dict[str, list[str]] = {
    "n-gram off": [],
    "n-gram on": NGRAM,
    "self-draft (-md the model, n_max 3)": ["-md", str(embedded_model_path()), "--spec-type", "draft-simple",
                                            "--spec-draft-n-max", "3"],
}


def decode_once(base: str, tokens: int) -> tuple[float, int, int, str]:
    """One greedy completion: decode tokens/s, drafts verified and kept, and the text."""
    reply = requests.post(base + "/completion", timeout=600, json={
        "prompt": PROMPT, "n_predict": tokens, "temperature": 0, "cache_prompt": True})
    reply.raise_for_status()
    body: dict[str, Any] = reply.json()
    timings = body["timings"]
    return (float(timings["predicted_per_second"]), int(timings.get("draft_n", 0)),
            int(timings.get("draft_n_accepted", 0)), str(body["content"]))


def measure(command: list[str], port: int, cwd: Path, rounds: int, tokens: int) -> tuple[float, int, int, str]:
    with running(command, port, "/health", {}, cwd=cwd) as server:
        decode_once(server.base, 16)  # warm up; the prompt is cached from here on
        runs = [decode_once(server.base, tokens) for _ in range(rounds)]
    speed = statistics.median(run[0] for run in runs)
    return speed, runs[-1][1], runs[-1][2], runs[-1][3]


def speculative_table(threads: int = 2, rounds: int = 3, tokens: int = 256) -> None:
    from bench.llama_server import llama_server  # builds it once (cached)

    model = str(embedded_model_path())
    binary = llama_server()
    results: dict[tuple[str, str], tuple[float, int, int, str]] = {}
    for name, flags in CONFIGS.items():  # one server at a time, never two together
        port = free_port()
        ours = [sys.executable, "-m", "app", "--model", model, "--port", str(port), "-np", "1", "-c", "4096",
                "-t", str(threads), *flags]
        results[name, "ours"] = measure(ours, port, ROOT, rounds, tokens)
        port = free_port()
        theirs = [str(binary), "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", "1", "-c", "4096",
                  "-t", str(threads), "--no-webui", *flags]
        results[name, "llama-server"] = measure(theirs, port, binary.parent, rounds, tokens)

    print(f"speculative decoding: an edit task ({len(PROMPT.split())} words of prompt, {tokens} tokens, greedy), "
          f"one slot, {threads} threads, median of {rounds}; decode tok/s (drafts kept/verified)")
    print("| configuration | vertex-llama | llama-server | ours/llama-server | same text as without (ours, theirs) |")
    print("|---|---|---|---|---|")
    for name in CONFIGS:
        ours_run, their_run = results[name, "ours"], results[name, "llama-server"]

        def cell(run: tuple[float, int, int, str]) -> str:
            return f"{run[0]:.1f} ({run[2]}/{run[1]})" if run[1] else f"{run[0]:.1f}"

        same = ", ".join("yes" if results[name, side][3] == results["n-gram off", side][3] else "no"
                         for side in ("ours", "llama-server"))
        print(f"| {name} | {cell(ours_run)} | {cell(their_run)} | {ours_run[0] / their_run[0]:.2f} | {same} |")
    for side in ("ours", "llama-server"):
        on, off = results["n-gram on", side][0], results["n-gram off", side][0]
        print(f"n-gram on / off, {side}: {on / off:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    speculative_table(args.threads, args.rounds, args.tokens)


if __name__ == "__main__":
    main()
