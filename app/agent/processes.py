"""Running a tool's command: bounded output, bounded time, the whole process group stopped at the end.

A command runs in a session of its own, so that a timeout (or a client that leaves a stream) kills
everything it started (``sh -c 'sleep 1000 &'`` included), not only the shell. Output past the cap is
read and dropped, so that a chatty command never blocks on a full pipe before its timeout."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

TRUNCATED = "\n[output truncated]"
READ_SIZE = 65536


@dataclass(frozen=True)
class ExecResult:
    output: str
    exit_code: int = -1
    timed_out: bool = False
    raw: bytes = b""  # the kept output's bytes (a file read through ``cat``)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _feed(process: subprocess.Popen[bytes], data: bytes | None) -> None:
    assert process.stdin is not None
    try:
        if data:
            process.stdin.write(data)
        process.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def run_process(argv: Sequence[str], max_output: int, timeout: float, *, cwd: str | None = None,
                stdin: bytes | None = None, on_chunk: Callable[[str], bool] | None = None,
                combine_stderr: bool = True) -> ExecResult:
    """Run ``argv`` for at most ``timeout`` seconds, keeping its first ``max_output`` bytes of output.
    ``on_chunk`` gets each piece as it comes; returning False stops the command (a client that left)."""
    try:
        process = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT if combine_stderr else subprocess.DEVNULL,
                                   cwd=cwd or None, start_new_session=True)
    except OSError as exc:
        return ExecResult(f"failed to spawn process: {exc.strerror or exc}")
    _feed(process, stdin)
    assert process.stdout is not None
    fd = process.stdout.fileno()
    kept = bytearray()
    truncated = timed_out = stopped = False
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        readable, _, _ = select.select([fd], [], [], min(left, 0.25))
        if not readable:
            continue
        chunk = os.read(fd, READ_SIZE)
        if not chunk:
            break
        if truncated:
            continue
        room = max_output - len(kept)
        piece = chunk[:room]
        kept += piece
        truncated = len(chunk) > room
        if on_chunk is not None and piece and not on_chunk(piece.decode("utf-8", "replace")):
            stopped = True
            break
    if timed_out or stopped:
        _kill_group(process)
    process.stdout.close()
    try:
        exit_code = process.wait(timeout=max(0.0, deadline - time.monotonic()) + 5)
    except subprocess.TimeoutExpired:  # the shell left, a grandchild holds on: stop them all
        _kill_group(process)
        exit_code = process.wait()
        timed_out = True
    _kill_group(process)  # whatever the command left running in the background
    output = kept.decode("utf-8", "replace") + (TRUNCATED if truncated else "")
    return ExecResult(output, exit_code, timed_out, bytes(kept))
