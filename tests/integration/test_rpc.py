"""--rpc: the model's layers on another process's devices through ggml's RPC backend, as llama-server
offloads to llama.cpp's rpc-server. The rpc-server here is ggml's own server loop on this machine's CPU
(tests/rpc_server.py); the served answers equal a local CPU server's with the same (unrepacked) kernels."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import ROOT, clean_environment, free_port, launch, start

MESSAGES = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture
def rpc_server(tmp_path: Path) -> Iterator[str]:
    endpoint = f"127.0.0.1:{free_port()}"
    with (tmp_path / "rpc-server.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "tests.rpc_server", endpoint, "2"], cwd=ROOT,
                                   stdout=log, stderr=subprocess.STDOUT, env=clean_environment({}))
    try:
        host, port = endpoint.split(":")
        while True:  # pytest's timeout bounds the wait
            assert process.poll() is None, (tmp_path / "rpc-server.log").read_text()
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield endpoint
    finally:
        process.kill()
        process.wait(30)


def answer(server_url: str) -> str:
    reply = requests.post(f"{server_url}/v1/chat/completions", timeout=300, json={
        "messages": MESSAGES, "max_tokens": 8, "temperature": 0})
    assert reply.status_code == 200, reply.text[:300]
    text: str = reply.json()["choices"][0]["message"]["content"]
    return text


def test_list_devices_names_the_rpc_servers_devices(rpc_server: str) -> None:
    listed = subprocess.run([sys.executable, "-m", "app", "--list-devices", "--rpc", rpc_server], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env=clean_environment({}))
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert f"RPC0: {rpc_server}" in listed.stdout, listed.stdout


def test_the_layers_run_on_the_rpc_server(rpc_server: str, tmp_path: Path) -> None:
    args = ["-np", "1", "-c", "1024", "--no-repack"]
    remote = start(tmp_path, [*args, "--rpc", rpc_server, "-ngl", "99", "-v"])  # -v: llama.cpp's load lines
    try:
        remote_answer = answer(remote.base)
        log = remote.log()
        assert "offloaded 31/31 layers to GPU" in log and "RPC0" in log, log[-3000:]
    finally:
        assert remote.stop() == 0, remote.log()
    local = start(tmp_path, [*args, "-ngl", "0"])
    try:
        assert answer(local.base) == remote_answer
    finally:
        assert local.stop() == 0, local.log()


def test_an_rpc_server_that_is_not_there_stops_the_start_by_name(tmp_path: Path) -> None:
    endpoint = f"127.0.0.1:{free_port()}"
    refused = launch(tmp_path, ["--rpc", endpoint, "-np", "1", "-c", "1024"])
    assert refused.process.wait(120) == 4
    assert f"--rpc {endpoint}: no rpc-server answers there" in refused.log()
