"""MCP servers over stdio, through the official ``mcp`` SDK's client: each server is started once at start-up to
list its tools, then stopped, and started again on demand at its first call, as llama-server's. One session
per server, shared by concurrent calls; one that dies (or floods its stdout) is started again at the next call,
one that fails to start is left alone for a few seconds. Nothing a server does takes this one down: every
wait is bounded and every failure is an ``{"error": ...}`` for the caller.

The SDK is asyncio-based: the sessions live on one event loop, on a thread of its own ("mcp")."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from app.agent.mcp_config import McpServerConfig
from app.agent.mcp_transport import MAX_LINE, ServerOutput, bounded_stdio

log = logging.getLogger(__name__)

WARMUP_SECONDS = 10.0  # tool discovery at start-up, per server
COOLDOWN_SECONDS = 5.0  # after a failed start
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class McpTool:
    server: str
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class _Live:
    client: Client
    output: ServerOutput
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    @property
    def alive(self) -> bool:
        return not self.output.exited.is_set() and not self.scope.cancel_called

    def explain(self, exc: BaseException) -> str:
        return explain(self.output, exc)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def explain(output: ServerOutput, exc: BaseException) -> str:
    """What went wrong with a server, for the caller: the transport's finding, else the error, and what the
    server last wrote on stderr."""
    leaf = _leaf(exc)
    parts = [output.problem or f"MCP server {output.name}: {getattr(leaf, 'message', None) or leaf}"]
    if output.exited.is_set() and not output.problem:
        parts.append("(the server exited)")
    tail = [line.strip() for line in output.stderr_tail.splitlines() if line.strip()][-3:]
    if tail:
        parts.append("stderr: " + " | ".join(tail))
    return " ".join(parts)


def result_answer(result: Any) -> dict[str, Any]:
    """A ``tools/call`` result as ``/tools`` answers it: the text parts joined by newlines, or its error."""
    texts = [part.text for part in (result.content or []) if getattr(part, "type", "") == "text"]
    text = "\n".join(texts)
    if getattr(result, "is_error", False):
        return {"error": text or "MCP tool returned an error"}
    return {"plain_text_response": text}


class McpServers:
    """The declared servers, their tools, and calls to them from any thread."""

    def __init__(self, configs: list[McpServerConfig], hidden_env: Collection[str] = (),
                 max_line: int = MAX_LINE) -> None:
        self.configs = {config.name: config for config in configs}
        self.hidden_env = frozenset(hidden_env)
        self.max_line = max_line
        self.tools: list[McpTool] = []
        self._live: dict[str, _Live] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._cooldown: dict[str, float] = {}
        self._owners: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp", daemon=True)
        self._thread.start()

    def _run(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def start(self) -> None:
        """Every server started, its tools listed, and stopped (all at once, each bounded)."""
        async def discover_all() -> list[list[McpTool]]:
            return list(await asyncio.gather(*(self._discover(config) for config in self.configs.values())))

        found = self._run(discover_all()).result()
        self.tools = [tool for tools in found for tool in tools]

    def _environment(self, config: McpServerConfig) -> dict[str, str]:
        """The server's environment: this one's (less its secrets) with the declaration's on top."""
        return {key: value for key, value in os.environ.items() if key not in self.hidden_env} | config.env

    async def _open(self, config: McpServerConfig, bound: float) -> _Live:
        ready: asyncio.Future[_Live] = self._loop.create_future()
        output = ServerOutput(config.name)

        async def own() -> None:
            try:
                transport = bounded_stdio([config.command, *config.args], self._environment(config), config.cwd,
                                          output, self.max_line)
                async with Client(transport, mode="legacy", read_timeout_seconds=bound) as client:
                    live = _Live(client, output)
                    ready.set_result(live)
                    with live.scope:
                        await output.exited.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
                elif not isinstance(exc, asyncio.CancelledError):
                    log.warning("MCP server %s: session ended: %s", config.name, exc)

        task = self._loop.create_task(own())
        self._owners.add(task)
        task.add_done_callback(self._owners.discard)
        try:
            return await asyncio.wait_for(asyncio.shield(ready), bound)
        except Exception as exc:
            task.cancel()
            with anyio.move_on_after(0.5):  # its stderr, for the reason
                await output.exited.wait()
            raise RuntimeError(explain(output, exc)) from None
        except BaseException:
            task.cancel()
            raise

    async def _discover(self, config: McpServerConfig) -> list[McpTool]:
        try:
            live = await self._open(config, WARMUP_SECONDS)
        except Exception as exc:
            log.warning("MCP warmup: failed to start '%s': %s", config.name, _leaf(exc))
            return []
        try:
            listed = await asyncio.wait_for(live.client.list_tools(), WARMUP_SECONDS)
        except Exception as exc:
            log.warning("MCP warmup: '%s' did not list its tools: %s", config.name, live.explain(exc))
            return []
        finally:
            live.scope.cancel()
        tools = [McpTool(config.name, tool.name, tool.description or "",
                         tool.model_dump(by_alias=True, exclude_none=True).get("inputSchema") or {})
                 for tool in listed.tools]
        log.info("MCP warmup: '%s' discovered %d tools", config.name, len(tools))
        return tools

    async def _session(self, config: McpServerConfig) -> _Live | None:
        lock = self._locks.setdefault(config.name, asyncio.Lock())
        async with lock:
            live = self._live.get(config.name)
            if live is not None and live.alive:
                return live
            if live is not None:
                log.warning("MCP '%s' is no longer alive: %s", config.name, live.explain(RuntimeError("gone")))
            if time.monotonic() < self._cooldown.get(config.name, 0.0):
                return None
            try:
                live = await self._open(config, config.timeout_ms / 1000)
            except Exception as exc:
                log.warning("MCP '%s': failed to start: %s", config.name, _leaf(exc))
                self._cooldown[config.name] = time.monotonic() + COOLDOWN_SECONDS
                return None
            self._live[config.name] = live
            return live

    async def _call(self, config: McpServerConfig, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        live = await self._session(config)
        if live is None:
            return {"error": f"MCP server unavailable: {config.name}"}
        seconds = config.timeout_ms / 1000
        live.output.stderr_tail = ""  # what this call makes the server say
        try:
            result = await asyncio.wait_for(live.client.call_tool(tool, arguments, read_timeout_seconds=seconds),
                                            seconds + 1)
        except TimeoutError:
            return {"error": "request timed out"}
        except MCPError as exc:
            if exc.error.code == REQUEST_TIMEOUT:
                return {"error": "request timed out"}
            if exc.error.code != CONNECTION_CLOSED:
                return {"error": exc.error.message}
            return {"error": await self._lost(config.name, live, exc)}
        except Exception as exc:
            return {"error": await self._lost(config.name, live, exc)}
        return result_answer(result)

    async def _lost(self, name: str, live: _Live, exc: BaseException) -> str:
        """A session that broke: dropped (the next call starts the server again), and why, once it has exited."""
        with anyio.move_on_after(1.0):
            await live.output.exited.wait()
        live.scope.cancel()
        if self._live.get(name) is live:
            del self._live[name]
        return live.explain(exc)

    def call_tool(self, server: str, tool: str, arguments: dict[str, Any],
                  should_stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
        """Call ``tool`` of ``server`` from any thread; a client that leaves (``should_stop``) cancels it."""
        config = self.configs.get(server)
        if config is None:
            return {"error": f"MCP server unavailable: {server}"}
        future = self._run(self._call(config, tool, arguments))
        while True:
            try:
                return dict(future.result(timeout=POLL_SECONDS))
            except concurrent.futures.TimeoutError:
                if should_stop():
                    future.cancel()
                    return {"error": "cancelled"}

    def close(self) -> None:
        """Stop every server and the loop (bounded)."""
        async def stop_all() -> None:
            for live in self._live.values():
                live.scope.cancel()
            if self._owners:
                await asyncio.wait(self._owners, timeout=8)

        if self._loop.is_running():
            try:
                self._run(stop_all()).result(timeout=10)
            except Exception:
                log.warning("MCP: servers did not stop in time")
            self._loop.call_soon_threadsafe(self._loop.stop)
