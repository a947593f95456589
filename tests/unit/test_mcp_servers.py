"""MCP servers over stdio through the ``mcp`` SDK, against a real MCP server written with the same SDK
(tests/mcp_standin.py): tools listed at start-up, calls, failures of every kind, none of which takes this
server down."""

from __future__ import annotations

import concurrent.futures
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.agent.mcp_config import McpConfigError, McpServerConfig, load_servers, parse_servers
from app.agent.mcp_servers import McpServers
from app.agent.options import AgentOptions
from app.agent.tool import Limits
from app.agent.toolbox import Toolbox

STANDIN = str(Path(__file__).resolve().parents[1] / "mcp_standin.py")


def standin(name: str = "st", *args: str, timeout_ms: int = 20000, **extra: object) -> McpServerConfig:
    return McpServerConfig(name, sys.executable, (STANDIN, *args), timeout_ms=timeout_ms, **extra)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def server_cwd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-cwd")


@pytest.fixture(scope="module")
def servers(server_cwd: Path) -> Iterator[McpServers]:
    started = McpServers([standin(env={"GREETING": "hello"}, cwd=str(server_cwd)), standin("quick", timeout_ms=1500),
                          standin("raw", "--raw"), standin("broken", "--broken-start")],
                         hidden_env={"LLAMA_API_KEY"}, max_line=1 << 20)
    started.start()
    yield started
    started.close()


def test_tools_are_listed_at_start_up_and_a_server_that_cannot_start_is_left_out(servers: McpServers) -> None:
    names = {(tool.server, tool.name) for tool in servers.tools}
    assert {("st", "add"), ("st", "environment"), ("raw", "flood"), ("raw", "echo")} <= names
    assert not any(server == "broken" for server, _ in names)
    add = next(tool for tool in servers.tools if tool.server == "st" and tool.name == "add")
    assert add.description == "Add two integers." and set(add.input_schema["properties"]) == {"a", "b"}


def test_a_call_answers_its_text_with_the_declared_env_and_cwd(servers: McpServers, server_cwd: Path) -> None:
    assert servers.call_tool("st", "add", {"a": 2, "b": 40}) == {"plain_text_response": "42"}
    text = servers.call_tool("st", "environment", {"name": "GREETING"})["plain_text_response"]
    assert text.startswith(f"GREETING=hello cwd={server_cwd} ")


def test_the_servers_secrets_are_not_in_its_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_API_KEY", "sk-secret")
    monkeypatch.setenv("VISIBLE", "yes")
    servers = McpServers([standin()], hidden_env={"LLAMA_API_KEY"})
    try:
        assert servers.call_tool("st", "environment", {"name": "LLAMA_API_KEY"})["plain_text_response"].startswith(
            "LLAMA_API_KEY= ")
        assert servers.call_tool("st", "environment", {"name": "VISIBLE"})["plain_text_response"].startswith(
            "VISIBLE=yes ")
    finally:
        servers.close()


def test_a_tool_error_a_timeout_and_an_unknown_server(servers: McpServers) -> None:
    assert "error" in servers.call_tool("st", "fail", {"reason": "nope"})
    assert servers.call_tool("quick", "slow", {"seconds": 30}) == {"error": "request timed out"}
    assert servers.call_tool("quick", "add", {"a": 1, "b": 1}) == {"plain_text_response": "2"}  # still serves
    assert servers.call_tool("nobody", "add", {}) == {"error": "MCP server unavailable: nobody"}


def test_a_server_that_dies_mid_call_is_started_again_for_the_next(servers: McpServers) -> None:
    first = servers.call_tool("st", "environment", {"name": "X"})["plain_text_response"]
    crashed = servers.call_tool("st", "crash", {})
    assert crashed["error"].startswith("MCP server st:") and "crashing on purpose" in crashed["error"]
    again = servers.call_tool("st", "environment", {"name": "X"})["plain_text_response"]
    assert again.split("pid=")[1] != first.split("pid=")[1]  # a new process


def test_a_server_that_floods_its_stdout_is_stopped_and_started_again(servers: McpServers) -> None:
    flooded = servers.call_tool("raw", "flood", {})
    assert flooded == {"error": "MCP server raw sent a line over 1048576 bytes on stdout; stopped"}
    assert servers.call_tool("raw", "echo", {"text": "back"}) == {"plain_text_response": "back"}


def test_a_server_that_fails_to_start_is_unavailable(servers: McpServers) -> None:
    assert servers.call_tool("broken", "add", {"a": 1, "b": 2}) == {"error": "MCP server unavailable: broken"}


def test_concurrent_calls_share_one_session(servers: McpServers) -> None:
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: servers.call_tool("st", "slow", {"seconds": 1.5}), range(4)))
    assert answers == [{"plain_text_response": "slept 1.5"}] * 4
    assert time.monotonic() - started < 5.5  # not one after the other (4 x 1.5 s)


def test_a_caller_that_leaves_cancels_its_call(servers: McpServers) -> None:
    started = time.monotonic()
    answer = servers.call_tool("st", "slow", {"seconds": 30}, should_stop=lambda: time.monotonic() - started > 0.5)
    assert answer == {"error": "cancelled"} and time.monotonic() - started < 10


def test_mcp_tools_join_the_toolbox_as_server_underscore_tool_and_collisions_are_skipped(tmp_path: Path) -> None:
    box = Toolbox(AgentOptions(("read_file",), mcp_servers=(standin("read"), standin("st")),
                               limits=Limits(str(tmp_path))))
    try:
        listing = {entry["tool"]: entry for entry in box.listing()}
        assert listing["st_add"]["type"] == "mcp" and listing["st_add"]["permissions"] == {"write": False}
        assert listing["st_add"]["definition"]["function"]["parameters"]["required"] == ["a", "b"]
        assert "read_file" in listing and listing["read_file"]["type"] == "server"  # "read" + "_file" collided
        assert box.call(box.find("st_add", False), {"a": 3, "b": 4}) == {"plain_text_response": "7"}
    finally:
        box.close()


def test_cursor_format_declarations(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "x", "args": ["1"], "env": {"K": "v"},
                                                      "cwd": "/", "timeout_ms": 5}, "no-command": {}}}))
    inline = json.dumps({"mcpServers": {"a": {"command": "dup"}, "b": {"command": "y"}}})
    found = load_servers(str(config), inline)
    assert [(server.name, server.command) for server in found] == [("a", "x"), ("b", "y")]
    assert found[0] == McpServerConfig("a", "x", ("1",), {"K": "v"}, "/", 5)
    assert parse_servers("{}", "inline") == []
    for bad in ("{", '{"mcpServers": {"a": {"command": "x", "args": "1"}}}',
                '{"mcpServers": {"a": {"command": "x", "timeout_ms": -1}}}'):
        with pytest.raises(McpConfigError):
            parse_servers(bad, "inline")
    with pytest.raises(McpConfigError, match="failed to open"):
        load_servers(str(tmp_path / "missing.json"), None)
