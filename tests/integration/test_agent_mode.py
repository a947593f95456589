"""Agent mode on a real server with the embedded model: /tools (built-in tools and a real MCP server), the
model's forced tool call run through it, /cors-proxy, the CORS default, and what is off by default."""

from __future__ import annotations

import http.server
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from tests.integration.conftest import Server, start

STANDIN = str(Path(__file__).resolve().parents[1] / "mcp_standin.py")


def mcp_json(**servers: tuple[str, ...]) -> str:
    return json.dumps({"mcpServers": {name: {"command": sys.executable, "args": [STANDIN, *args]}
                                      for name, args in servers.items()}})


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("agent-workspace")
    (root / "notes.md").write_text("alpha\nbeta\n")
    return root


@pytest.fixture(scope="module")
def agent_server(server_dir: Path, workspace: Path) -> Iterator[Server]:
    server = start(server_dir, ["--tools", "all", "--tools-root", str(workspace), "--ui-mcp-proxy",
                                "--mcp-servers-json", mcp_json(st=()), "-c", "4096", "-np", "2"])
    yield server
    assert server.stop() == 0, server.log()


def post_tool(server: Server, tool: str, params: dict[str, Any] | None = None, **headers: str) -> requests.Response:
    body: dict[str, Any] = {"tool": tool}
    if params is not None:
        body["params"] = params
    return requests.post(server.url("/tools"), json=body, headers=headers, timeout=120)


def test_agent_mode_is_off_by_default(vertex_server: Server) -> None:
    for method, path in (("GET", "/tools"), ("POST", "/tools"), ("GET", "/cors-proxy"), ("POST", "/cors-proxy")):
        response = requests.request(method, vertex_server.url(path), json={"tool": "read_file"}, timeout=10)
        assert response.status_code == 403, (method, path)
        assert response.json()["error"] == {"code": 403, "message": "this feature is disabled",
                                            "type": "feature_disabled"}
    assert "security:" not in vertex_server.log()  # nothing started, nothing to warn about
    props = requests.get(vertex_server.url("/props"), timeout=10).json()
    assert props["cors_proxy_enabled"] is False and props["tools_enabled"] is False


def test_the_start_up_log_says_what_is_on_and_with_whose_privileges(agent_server: Server, workspace: Path) -> None:
    log = agent_server.log()
    assert "security: MCP proxy (experimental), server tools (experimental), MCP servers (experimental) enabled" \
        in log
    assert "run with this server's privileges" in log and f"confined to {workspace} (--tools-root)" in log
    assert "MCP warmup: 'st' discovered 5 tools" in log


def test_tools_lists_the_built_in_and_the_mcp_servers_tools(agent_server: Server) -> None:
    listing = requests.get(agent_server.url("/tools"), timeout=10).json()
    names = [entry["tool"] for entry in listing]
    assert names[:7] == ["read_file", "file_glob_search", "grep_search", "exec_shell_command", "write_file",
                         "edit_file", "get_info"]
    assert {"st_add", "st_environment", "st_slow", "st_fail", "st_crash"} <= set(names[7:])
    props = requests.get(agent_server.url("/props"), timeout=10).json()
    assert props["cors_proxy_enabled"] is True and props["tools_enabled"] is True  # the web UI asks /tools then
    by_name = {entry["tool"]: entry for entry in listing}
    assert by_name["st_add"]["type"] == "mcp" and by_name["write_file"]["permissions"] == {"write": True}


def test_the_models_forced_tool_call_runs_through_tools_and_its_answer_is_read(agent_server: Server,
                                                                               workspace: Path) -> None:
    """The real model, made to call a tool (tool_choice required), then given the tool's answer."""
    get_info = next(entry for entry in requests.get(agent_server.url("/tools"), timeout=10).json()
                    if entry["tool"] == "get_info")
    client = openai.OpenAI(base_url=agent_server.url("/v1"), api_key="unused")
    messages: list[Any] = [{"role": "user", "content": "Which operating system is the server running?"}]
    first = client.chat.completions.create(model="m", messages=messages, tools=[get_info["definition"]],
                                           tool_choice="required", max_tokens=64, temperature=0)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert isinstance(call, openai.types.chat.ChatCompletionMessageFunctionToolCall)
    assert call.function.name == "get_info" and first.choices[0].finish_reason == "tool_calls"
    ran = post_tool(agent_server, call.function.name, json.loads(call.function.arguments or "{}"))
    assert ran.status_code == 200 and ran.json()["cwd"] == str(workspace) and ran.json()["os"].startswith("Linux")
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps(ran.json())}]
    second = client.chat.completions.create(model="m", messages=messages, tools=[get_info["definition"]],
                                            tool_choice="none", max_tokens=16, temperature=0)
    assert second.choices[0].message.tool_calls is None and second.choices[0].message.content


def test_built_in_tools_run_in_the_tools_root(agent_server: Server, workspace: Path) -> None:
    assert post_tool(agent_server, "read_file", {"path": "notes.md"}).json() == {"plain_text_response": "alpha\nbeta\n"}
    assert post_tool(agent_server, "write_file", {"path": "out/new.txt", "content": "x"}).json()["bytes"] == 1
    assert (workspace / "out" / "new.txt").read_text() == "x"
    outside = post_tool(agent_server, "read_file", {"path": "/etc/hostname"})
    assert outside.status_code == 200 and outside.json()["error"].startswith("path is outside the tools root")
    shell = post_tool(agent_server, "exec_shell_command", {"command": "pwd"}, **{"X-Tool-Cwd": str(workspace / "out")})
    assert shell.json() == {"plain_text_response": f"{workspace / 'out'}\n\n[exit code: 0]"}


def test_a_streamed_shell_command(agent_server: Server) -> None:
    response = requests.post(agent_server.url("/tools"), stream=True, timeout=60, json={
        "tool": "exec_shell_command", "stream": True, "params": {"command": "echo one; sleep 0.2; echo two"}})
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in response.iter_lines(decode_unicode=True) if line.startswith("data: ")]
    assert "".join(event.get("chunk", "") for event in events) == "one\ntwo\n\n[exit code: 0]"
    assert events[-1] == {"done": True}


@pytest.mark.parametrize(("body", "headers", "status"), [
    ([1], {}, 400), ({"params": {}}, {}, 400), ({"tool": "read_file", "params": []}, {}, 400),
    ({"tool": "nope"}, {}, 404), ({"tool": "read_file", "stream": True, "params": {"path": "x"}}, {}, 404),
    ({"tool": "read_file", "params": {}}, {}, 400), ({"tool": "read_file", "params": {"path": 3}}, {}, 400),
    ({"tool": "get_info"}, {"X-Tool-Runtime": "ssh:-oProxyCommand=touch /tmp/pwned"}, 400),
    ({"tool": "get_info"}, {"X-Tool-Runtime": "chroot:/"}, 400),
    ({"tool": "get_info"}, {"X-Tool-Cwd": "/"}, 403),
])
def test_bad_calls_get_a_4xx_and_the_server_stays_up(agent_server: Server, body: Any, headers: dict[str, str],
                                                     status: int) -> None:
    response = requests.post(agent_server.url("/tools"), json=body, headers=headers, timeout=30)
    assert response.status_code == status, response.text
    assert response.json()["error"]["message"]
    assert requests.get(agent_server.url("/health"), timeout=10).status_code == 200


def test_mcp_tools_through_tools_and_a_crash_that_does_not_take_the_server_down(agent_server: Server) -> None:
    assert post_tool(agent_server, "st_add", {"a": 20, "b": 22}).json() == {"plain_text_response": "42"}
    crashed = post_tool(agent_server, "st_crash", {})
    assert crashed.status_code == 200 and "crashing on purpose" in crashed.json()["error"]
    assert post_tool(agent_server, "st_add", {"a": 1, "b": 2}).json() == {"plain_text_response": "3"}
    assert requests.get(agent_server.url("/health"), timeout=10).status_code == 200


def test_tools_limit_cors_to_localhost_by_default(agent_server: Server) -> None:
    local = requests.get(agent_server.url("/tools"), headers={"Origin": "http://localhost:5173"}, timeout=10)
    assert local.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
    remote = requests.get(agent_server.url("/tools"), headers={"Origin": "https://evil.example"}, timeout=10)
    assert "Access-Control-Allow-Origin" not in remote.headers


class Echo(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        payload = json.dumps({"method": self.command, "path": self.path, "auth": self.headers.get("Authorization"),
                              "cookie": self.headers.get("Cookie"), "body": body.decode()}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", "abc")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def echo_url() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_the_cors_proxy_forwards_the_prefixed_headers_and_relays_the_answer(agent_server: Server,
                                                                            echo_url: str) -> None:
    response = requests.post(agent_server.url("/cors-proxy"), params={"url": f"{echo_url}/mcp?x=1"}, data=b"{}",
                             headers={"x-llama-server-proxy-header-Authorization": "Bearer t", "Cookie": "c=1"},
                             timeout=30)
    assert response.status_code == 201 and response.headers["Mcp-Session-Id"] == "abc"
    assert response.headers["Content-Type"] == "application/json"  # the target's type, sent once
    assert response.json() == {"method": "POST", "path": "/mcp?x=1", "auth": "Bearer t", "cookie": None,
                               "body": "{}"}
    assert requests.get(agent_server.url("/cors-proxy"), params={"url": echo_url}, timeout=30).json()["method"] == "GET"


@pytest.mark.parametrize("url", ["", "ftp://example.com/", "http://user:pw@127.0.0.1/",
                                 "http://169.254.169.254/computeMetadata/v1/"])
def test_the_cors_proxy_refuses_bad_targets(agent_server: Server, url: str) -> None:
    response = requests.get(agent_server.url("/cors-proxy"), params={"url": url}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["message"]


def test_agent_a_config_file_and_the_bounds_on_a_real_server(server_dir: Path, tmp_path: Path) -> None:
    """-ag (every tool and the proxy), --mcp-servers-config (a file), --tools-max-timeout and --tools-max-output."""
    config = tmp_path / "mcp.json"
    config.write_text(mcp_json(files=()))
    server = start(server_dir, ["-ag", "--mcp-servers-config", str(config), "--tools-root", str(tmp_path),
                                "--tools-max-timeout", "1", "--tools-max-output", "300", "-c", "512", "-np", "1"])
    try:
        names = [entry["tool"] for entry in requests.get(server.url("/tools"), timeout=10).json()]
        assert names[:7] == ["read_file", "file_glob_search", "grep_search", "exec_shell_command", "write_file",
                             "edit_file", "get_info"] and "files_add" in names
        assert requests.get(server.url("/props"), timeout=10).json()["cors_proxy_enabled"] is True
        slept = post_tool(server, "exec_shell_command", {"command": "sleep 30", "timeout": 50}).json()
        assert slept["plain_text_response"].endswith("[exit due to timed out]")  # capped to 1 s, not 50
        long = post_tool(server, "exec_shell_command", {"command": "head -c 5000 /dev/zero | tr '\\0' y"}).json()
        assert long["plain_text_response"].startswith("y" * 300 + "\n[output truncated]")
    finally:
        assert server.stop() == 0, server.log()
