"""A stdio transport for the ``mcp`` SDK's client with bounds of its own: a line longer than ``max_line`` bytes
(a server flooding its stdout) ends the session and stops the server, the server's stderr goes to the log
with a bounded tail kept for errors, and the server runs in a process group of its own, stopped whole."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

import anyio
import mcp_types
from anyio.abc import ByteReceiveStream, Process
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

log = logging.getLogger(__name__)

MAX_LINE = 16 * 1024 * 1024  # one JSON-RPC message; longer is a flood
STDERR_TAIL = 4096
EXIT_GRACE_SECONDS = 2.0


@dataclass
class ServerOutput:
    """What a server said on stderr (its tail) and why its session ended, for the error a caller reads."""

    name: str
    stderr_tail: str = ""
    problem: str = ""
    exited: anyio.Event = field(default_factory=anyio.Event)


async def _stderr(stream: ByteReceiveStream, output: ServerOutput) -> None:
    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        async for chunk in stream:
            text = chunk.decode("utf-8", "replace")
            log.debug("MCP %s stderr: %s", output.name, text.rstrip())
            output.stderr_tail = (output.stderr_tail + text)[-STDERR_TAIL:]


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


async def _stdout(process: Process, sink: anyio.abc.ObjectSendStream[SessionMessage | Exception],
                  output: ServerOutput, max_line: int) -> None:
    assert process.stdout is not None
    pending = b""
    async with sink:
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stdout:
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if len(line) > max_line:
                        pending = line
                        break
                    if line.strip():
                        await sink.send(_parse(line))
                if len(pending) > max_line:
                    output.problem = f"MCP server {output.name} sent a line over {max_line} bytes on stdout; stopped"
                    log.warning("%s", output.problem)
                    _kill(process)
                    return


async def _stdin(process: Process, source: anyio.abc.ObjectReceiveStream[SessionMessage]) -> None:
    assert process.stdin is not None
    with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        async with source:
            async for message in source:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await process.stdin.send(data.encode("utf-8"))


def _kill(process: Process) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _stop(process: Process) -> None:
    with anyio.CancelScope(shield=True):
        if process.stdin is not None:
            with suppress(Exception):
                await process.stdin.aclose()
        with anyio.move_on_after(EXIT_GRACE_SECONDS):
            await process.wait()
        _kill(process)
        with anyio.move_on_after(EXIT_GRACE_SECONDS):
            await process.wait()


@asynccontextmanager
async def bounded_stdio(argv: list[str], env: Mapping[str, str], cwd: str | None, output: ServerOutput,
                        max_line: int = MAX_LINE) -> AsyncIterator[TransportStreams]:
    """The server's (read, write) streams while it runs; OSError when it cannot be spawned."""
    process = await anyio.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env=dict(env), cwd=cwd or None, start_new_session=True)
    sink, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, source = anyio.create_memory_object_stream[SessionMessage](0)

    async def watch() -> None:
        await process.wait()
        output.exited.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_stdout, process, sink, output, max_line)
        tasks.start_soon(_stdin, process, source)
        assert process.stderr is not None
        tasks.start_soon(_stderr, process.stderr, output)
        tasks.start_soon(watch)
        try:
            yield read_stream, write_stream
        finally:
            await _stop(process)
            for stream in (read_stream, write_stream, sink, source):
                await stream.aclose()
            tasks.cancel_scope.cancel()
