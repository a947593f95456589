"""Decode throughput of this checkout against itself at other git revisions and llama-server, in one run:
every server up at once (an idle server's threads sleep) and taking turns at each round, so the machine's
drift falls on all alike. Tells a change's cost from this machine's noise (bench/report.py's rows move
5-10 % from run to run).

    .venv/bin/python bench/throughput_ab.py [--revision REV[=DIR] ...] [--streams 1,8,32,64] [--rounds 3]

Prints, for each stream count, every server's best and median tok/s and its best / llama-server's.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.model_sources.files import embedded_model_path
from bench.report import in_turns, streams_tokens_per_second
from bench.side_by_side import add_server_arguments, servers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="1,8,32,64", help="stream counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    add_server_arguments(parser)
    args = parser.parse_args()
    model = str(embedded_model_path())
    with contextlib.ExitStack() as stack:
        bases = servers(stack, args, model, ours="this checkout")
        names = list(bases)
        for base in bases.values():  # warm up
            streams_tokens_per_second(base, 4, 16)
        print(f"tok/s of {args.max_tokens}-token chats, -np {args.slots} -c {args.ctx_size} -t {args.threads}, "
              f"{args.rounds} rounds: best (median), best / llama-server's best")
        for streams in (int(count) for count in args.streams.split(",")):
            results: dict[str, list[float]] = {name: [] for name in names}
            for round_index in range(args.rounds):
                for name in in_turns(names, round_index):
                    results[name].append(streams_tokens_per_second(bases[name], streams, args.max_tokens))
            theirs = max(results["llama-server"])
            print(f"  {streams:3d} streams  " + "   ".join(
                f"{name} {max(values):6.1f} ({statistics.median(values):6.1f}) {max(values) / theirs:.2f}"
                for name, values in results.items()), flush=True)


if __name__ == "__main__":
    main()
