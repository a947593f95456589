"""Time to healthy: this container against llama-server (bench/llama_server.py), started alternately.

    .venv/bin/python bench/startup.py [--rounds 7] [--slots 16] [--ctx-size 16384]

Each start runs alone: spawn the server, poll ``/health`` every 5 ms until it answers 200, stop it;
ours and llama-server take turns, so a slow spell of this shared machine falls on both. Prints each
start and the medians' ratio. Most of a start is llama.cpp's (the model's load and the KV cache's
allocation, which grows with ``--slots`` x context); this server adds the interpreter, gunicorn's
master and the worker's imports before the load (its HTTP side is imported while the model loads:
app/server/wiring.py). Not a test: timings on shared machines are noisy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.report import free_port, peer_command, running  # noqa: E402

POLL_SECONDS = 0.005


def seconds_to_healthy(command: list[str], port: int, cwd: Path) -> float:
    with running(command, port, "/health", {}, cwd=cwd, poll_seconds=POLL_SECONDS) as server:
        return server.healthy_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--slots", default="16")
    parser.add_argument("--ctx-size", default="16384")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    model = str(embedded_model_path())
    flags = ["-np", args.slots, "-c", args.ctx_size, "-t", str(args.threads)]
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(args.rounds):
        port = free_port()
        ours.append(seconds_to_healthy([sys.executable, "-m", "app", "-m", model, "--port", str(port), *flags],
                                       port, ROOT))
        port = free_port()
        command, cwd = peer_command("llama-server", model, port, args.threads, context=args.ctx_size,
                                    slots=args.slots)
        theirs.append(seconds_to_healthy(command, port, cwd))
    print(f"time to healthy, {args.slots} slots, -c {args.ctx_size}, {args.rounds} starts each (s)")
    print("  ours:         " + " ".join(f"{s:.3f}" for s in ours))
    print("  llama-server: " + " ".join(f"{s:.3f}" for s in theirs))
    mine, peer = statistics.median(ours), statistics.median(theirs)
    print(f"median: ours {mine:.3f} s, llama-server {peer:.3f} s, ours/llama-server {mine / peer:.2f}")


if __name__ == "__main__":
    main()
