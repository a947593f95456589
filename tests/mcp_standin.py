"""A real MCP server over stdio, written with the official ``mcp`` SDK, for agent mode's tests:
``python tests/mcp_standin.py [--broken-start | --raw | --only-wait]``. Its tools cover what a server may do to
its client: answer, fail, take its time, exit mid-call. The SDK keeps a tool from writing on the protocol's stdout, so
``--raw`` is a server written by hand against the specification (one JSON-RPC message a line, as the spec
allows) whose tool ``flood`` writes an endless line there."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("standin")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def environment(name: str) -> str:
    """An environment variable of the server and its working directory."""
    return f"{name}={os.environ.get(name, '')} cwd={os.getcwd()} pid={os.getpid()}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with ``reason``."""
    raise ValueError(reason)


@server.tool()
async def slow(seconds: float) -> str:
    """Answers after ``seconds``."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def crash() -> str:
    """Exits the server mid-call."""
    sys.stderr.write("standin: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


def raw_server() -> None:
    """initialize, tools/list (``flood``, ``echo``) and tools/call, by hand."""
    tools = [{"name": "flood", "description": "Floods stdout.", "inputSchema": {"type": "object"}},
             {"name": "echo", "description": "Echoes text.",
              "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue
        if method == "initialize":
            result: dict[str, object] = {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                                         "serverInfo": {"name": "raw", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call" and message["params"]["name"] == "flood":
            while True:
                os.write(1, b"x" * 65536)
        else:
            text = message["params"]["arguments"].get("text", "")
            result = {"content": [{"type": "text", "text": text}]}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
        sys.stdout.flush()


waiter = MCPServer("waiter")


@waiter.tool()
async def wait() -> str:
    """Waits for the next event (a minute at most)."""
    await asyncio.sleep(60)
    return "no event"


if __name__ == "__main__":
    if "--only-wait" in sys.argv:
        waiter.run("stdio")
        sys.exit(0)
    if "--raw" in sys.argv:
        raw_server()
        sys.exit(0)
    if "--broken-start" in sys.argv:
        sys.stderr.write("standin: refusing to start\n")
        sys.exit(2)
    server.run("stdio")
