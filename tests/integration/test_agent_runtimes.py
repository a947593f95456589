"""Agent mode's runtimes with real isolates, on Vertex AI's terms: the tools in a podman container that the
server starts and removes (--tools-runtime podman:IMAGE), and on a host reached over SSH (x-tool-runtime),
switched on by the operator's LLAMA_ARG_* variables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.conftest import Server, start
from tests.isolates import IMAGE, build_image, containers, sshd


@pytest.fixture(scope="module")
def podman_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build_image(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="module")
def ssh_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with sshd(tmp_path_factory.mktemp("sshd")) as config:
        yield config


@pytest.fixture(scope="module")
def runtime_server(server_dir: Path, podman_env: dict[str, str], ssh_config: Path) -> Iterator[Server]:
    server = start(server_dir, ["-c", "2048", "-np", "1"], {
        "AIP_MODE": "PREDICTION", "AIP_HEALTH_ROUTE": "/health", "AIP_PREDICT_ROUTE": "/predict",
        "LLAMA_ARG_TOOLS": "all", "LLAMA_ARG_TOOLS_RUNTIME": f"podman:{IMAGE}",
        "LLAMA_ARG_TOOLS_SSH_CONFIG": str(ssh_config), **podman_env})
    yield server
    assert server.stop() == 0, server.log()


def post_tool(server: Server, tool: str, params: dict[str, Any], **headers: str) -> dict[str, Any]:
    response = requests.post(server.url("/tools"), json={"tool": tool, "params": params}, headers=headers,
                             timeout=120)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_on_vertex_the_log_says_what_the_operator_enabled(runtime_server: Server) -> None:
    log = runtime_server.log()
    assert "security: server tools (experimental), tools runtime (experimental) enabled" in log
    assert "run with this container's privileges" in log
    assert "tools runtime: podman container" in log


def test_tools_run_in_the_container_the_server_started(runtime_server: Server, podman_env: dict[str, str],
                                                       tmp_path: Path) -> None:
    assert len(containers(podman_env)) == 1
    info = post_tool(runtime_server, "get_info", {})
    assert info["cwd"] == "/work" and info["os"].startswith("Linux")
    written = post_tool(runtime_server, "write_file", {"path": "/work/in-container.txt", "content": "inside\n"})
    assert written["bytes"] == 7 and not Path("/work/in-container.txt").exists()
    assert post_tool(runtime_server, "read_file", {"path": "in-container.txt"}) == {"plain_text_response": "inside\n"}
    edited = post_tool(runtime_server, "edit_file", {"path": "in-container.txt",
                                                     "edits": [{"old_text": "inside", "new_text": "edited"}]})
    assert edited["edits_applied"] == 1
    found = post_tool(runtime_server, "file_glob_search", {"path": "/work", "include": "*.txt"})
    assert [entry["path"] for entry in found["entries"]] == ["in-container.txt"]
    grep = post_tool(runtime_server, "grep_search", {"path": "/work", "pattern": "edit", "return_line_numbers": True})
    assert "in-container.txt:1:edited" in grep["plain_text_response"]
    shell = post_tool(runtime_server, "exec_shell_command", {"command": "cat /work/in-container.txt; ls /bin/busybox"})
    assert shell["plain_text_response"] == "edited\n/bin/busybox\n\n[exit code: 0]"


def test_a_command_that_never_ends_is_ended_inside_the_container(runtime_server: Server) -> None:
    """Killing the host's ``podman exec`` would leave the command running in the container: the runtime runs
    it under the container's own ``timeout`` (busybox's ends it with SIGTERM: exit 143)."""
    shell = post_tool(runtime_server, "exec_shell_command", {"command": "sleep 300", "timeout": 1})
    assert shell["plain_text_response"] in ("\n[exit code: 143]", "\n[exit code: 124]")
    left = post_tool(runtime_server, "exec_shell_command", {"command": "ps | grep -c '[s]leep 300'"})
    assert left["plain_text_response"].startswith("0\n")


def test_tools_run_on_a_host_over_ssh(runtime_server: Server, tmp_path: Path) -> None:
    target = tmp_path / "over-ssh.txt"
    written = post_tool(runtime_server, "write_file", {"path": str(target), "content": "remote\n"},
                        **{"X-Tool-Runtime": "ssh:toolbox"})
    assert written["bytes"] == 7 and target.read_text() == "remote\n"  # the "remote" host is this one
    shell = post_tool(runtime_server, "exec_shell_command", {"command": "echo ${SSH_CONNECTION:+over-ssh}; pwd"},
                      **{"X-Tool-Runtime": "ssh:toolbox", "X-Tool-Cwd": str(tmp_path)})
    assert shell["plain_text_response"] == f"over-ssh\n{tmp_path}\n\n[exit code: 0]"
    read = post_tool(runtime_server, "read_file", {"path": "over-ssh.txt"},
                     **{"X-Tool-Runtime": "ssh:toolbox", "X-Tool-Cwd": str(tmp_path)})
    assert read == {"plain_text_response": "remote\n"}
    unknown = requests.post(runtime_server.url("/tools"), json={"tool": "get_info"}, timeout=60,
                            headers={"X-Tool-Runtime": "ssh:nowhere"})
    assert unknown.status_code == 200 and unknown.json()["os"] == "unknown"  # ssh failed: nothing ran


def test_the_container_is_removed_when_the_server_stops(server_dir: Path, podman_env: dict[str, str]) -> None:
    before = set(containers(podman_env))
    server = start(server_dir, ["-c", "512", "-np", "1", "--tools", "get_info", "--tools-runtime", f"podman:{IMAGE}"],
                   podman_env)
    try:
        assert len(set(containers(podman_env)) - before) == 1
        assert post_tool(server, "get_info", {})["cwd"] == "/work"
    finally:
        assert server.stop() == 0, server.log()
    assert set(containers(podman_env)) == before
