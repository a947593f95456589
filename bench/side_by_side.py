"""This server, itself at other git revisions, and llama-server, all up at once with the same flags: what
bench/first_token.py, bench/fan_out.py and bench/throughput_ab.py measure in turns (an idle server's threads
sleep, so the machine's drift falls on all alike)."""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import free_port, peer_command, running  # noqa: E402


def add_server_arguments(parser: argparse.ArgumentParser, revisions: bool = True) -> None:
    """The flags every server gets (``-np``, ``-c``, ``-t``), this server's own, and (``revisions``) the
    git revisions to serve beside it."""
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--slots", default="16")
    parser.add_argument("--ctx-size", default="16384")
    parser.add_argument("--extra", default="", help="more flags for this server, space-separated")
    if revisions:
        parser.add_argument("--revision", action="append", default=[], metavar="REV[=DIR]",
                            help="also this server at a git revision (DIR: packages it takes first), repeatable")


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """A detached checkout of ``revision`` beside this one, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="side-by-side-")) / revision
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(folder), revision],
                   check=True)
    try:
        yield folder
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)], check=False)


def ours_at(stack: contextlib.ExitStack, args: argparse.Namespace, model: str, cwd: Path,
            env: dict[str, str] | None = None, prediction: bool = False) -> str:
    """The base URL of this server, run from ``cwd`` (this checkout or a revision's worktree); ``prediction``:
    as Vertex AI runs it (``AIP_MODE=PREDICTION``, its port from ``AIP_HTTP_PORT``)."""
    port = free_port()
    command = [sys.executable, "-m", "app", "-m", model, "--port", str(port), "-np", args.slots,
               "-c", args.ctx_size, "-t", str(args.threads), *args.extra.split()]
    vertex = {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port)} if prediction else {}
    return stack.enter_context(running(command, port, "/health", {**(env or {}), **vertex}, cwd=cwd)).base


def servers(stack: contextlib.ExitStack, args: argparse.Namespace, model: str, ours: str = "vertex-llama",
            peer: bool = True, prediction: bool = False) -> dict[str, str]:
    """Base URLs by name: this checkout (``ours``), each ``--revision`` (``@REV``) and (``peer``) llama-server."""
    bases = {ours: ours_at(stack, args, model, ROOT, prediction=prediction)}
    for revision, _, packages in (given.partition("=") for given in getattr(args, "revision", [])):
        env = {"PYTHONPATH": packages} if packages else {}
        bases[f"@{revision}"] = ours_at(stack, args, model, stack.enter_context(worktree(revision)), env, prediction)
    if peer:
        port = free_port()
        command, cwd = peer_command("llama-server", model, port, args.threads, context=args.ctx_size,
                                    slots=args.slots)
        bases["llama-server"] = stack.enter_context(running(command, port, "/health", {}, cwd=cwd)).base
    return bases
