"""The command lines of the pinned llama.cpp's tools/server/README.md, as a llama-server user types them, with
a local model's path for theirs (and, where a line binds 0.0.0.0, this machine's 127.0.0.1: the tests serve
on loopback only). Each starts and serves. Covered where their feature is: ``-hf`` (test_hub_models.py),
``--models-dir`` and ``--models-preset`` (test_router.py), ``--mcp-servers-config`` (test_agent_mode.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import ROOT, clean_environment, free_port, launch

MODEL = str(embedded_model_path())
UI_CONFIG = '{"pasteLongTextToFileLen": 0, "renderUserContentAsMarkdown": true}'


@pytest.mark.parametrize("line", [
    ["-m", MODEL, "-c", "2048"],  # Quick Start
    ["-m", MODEL, "-c", "512", "--host", "127.0.0.1", "--port", "PORT", "--n-gpu-layers", "99"],  # the Docker line
    ["-m", MODEL, "--ui-config", UI_CONFIG],  # the web UI's settings
], ids=["quick-start", "docker", "ui-config"])
def test_a_readme_command_line_starts_and_serves(server_dir: Path, line: list[str]) -> None:
    port = free_port()
    server = launch(server_dir, [str(port) if word == "PORT" else word for word in line], port=port)
    try:
        server.wait_healthy()
        reply = requests.post(server.url("/v1/chat/completions"), timeout=120, json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
        assert reply.status_code == 200, reply.text[:300]
        props = requests.get(server.url("/props"), timeout=10).json()
        if "--ui-config" in line:
            assert props["ui_settings"] == json.loads(UI_CONFIG)
        if "-c" in line:  # --parallel auto: 4 slots, each up to the whole shared context, as llama-server's /props
            assert (props["default_generation_settings"]["n_ctx"], props["total_slots"]) == (
                int(line[line.index("-c") + 1]), 4)
    finally:
        assert server.stop() == 0, server.log()


def test_the_routers_ctx_line_is_refused_as_llama_server_refuses_it() -> None:
    """The README's router example ``llama-server -ctx 8192 -n 1024 -np 2``: llama-server's parser has no
    ``-ctx`` (``-c``/``--ctx-size``), so it stops with a usage error; so does this server (exit 2)."""
    result = subprocess.run([sys.executable, "-m", "app", "-ctx", "8192", "-n", "1024", "-np", "2"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, env=clean_environment({}))
    assert result.returncode == 2 and "-ctx" in result.stderr, result.stderr[-1000:]
