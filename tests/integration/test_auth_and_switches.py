"""API keys, and endpoints switched off, on a real server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import requests

from tests.integration.conftest import ROOT, Server, clean_environment, start

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}


@pytest.fixture(scope="module")
def keyed_server(server_dir: Path) -> Iterator[Server]:
    key_file = server_dir / "keys.txt"
    key_file.write_text("from-file\n")
    server = start(
        server_dir,
        ["--api-key", "alpha,beta", "--api-key-file", str(key_file), "--no-slots", "-np", "2", "-c", "2048"],
        {"AIP_MODE": "PREDICTION"},
    )
    yield server
    assert server.stop() == 0, server.log()


def test_requests_without_a_valid_key_are_401(keyed_server: Server) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-Api-Key": "wrong"}):
        response = requests.post(keyed_server.url("/v1/chat/completions"), json=CHAT, headers=headers, timeout=30)
        assert response.status_code == 401
        assert response.json() == {"error": {"code": 401, "message": "Invalid API Key",
                                             "type": "authentication_error"}}


@pytest.mark.parametrize(
    "headers",
    [{"Authorization": "Bearer alpha"}, {"Authorization": "Bearer beta"}, {"X-Api-Key": "from-file"}],
)
def test_each_configured_key_works(keyed_server: Server, headers: dict[str, str]) -> None:
    response = requests.post(keyed_server.url("/v1/chat/completions"), json=CHAT, headers=headers, timeout=60)
    assert response.status_code == 200


def test_public_routes_need_no_key(keyed_server: Server) -> None:
    for path in ("/health", "/v1/health", "/models", "/v1/models"):
        assert requests.get(keyed_server.url(path), timeout=10).status_code == 200
    assert requests.get(keyed_server.url("/props"), timeout=10).status_code == 401


def test_the_predict_route_follows_the_key_rule(keyed_server: Server) -> None:
    body = {"instances": [{"@requestFormat": "tokenize", "content": "hi"}]}
    assert requests.post(keyed_server.url("/predict"), json=body, timeout=30).status_code == 401
    ok = requests.post(keyed_server.url("/predict"), json=body, headers={"Authorization": "Bearer alpha"},
                       timeout=30)
    assert ok.status_code == 200 and "tokens" in ok.json()["predictions"][0]


def test_the_openai_sdk_sends_its_key(keyed_server: Server) -> None:
    good = openai.OpenAI(base_url=keyed_server.url("/v1"), api_key="alpha", max_retries=0)
    assert good.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    bad = openai.OpenAI(base_url=keyed_server.url("/v1"), api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)


def test_switched_off_endpoints_are_501(keyed_server: Server) -> None:
    headers = {"Authorization": "Bearer alpha"}
    slots = requests.get(keyed_server.url("/slots"), headers=headers, timeout=10)
    assert slots.status_code == 501
    assert slots.json()["error"] == {
        "code": 501, "type": "not_supported_error",
        "message": "This server does not support slots endpoint. Start it with `--slots`",
    }
    # this server runs in Vertex AI mode, where /metrics is on without --metrics (and needs no key)
    assert requests.get(keyed_server.url("/metrics"), timeout=10).status_code == 200
    props = requests.post(keyed_server.url("/props"), json={}, headers=headers, timeout=10)
    assert props.status_code == 501 and "--props" in props.json()["error"]["message"]


def test_on_vertex_metrics_are_on_and_need_no_key(tmp_path: Path) -> None:
    """Vertex AI's scraper sends no API key, and AutoMetrics reads the vllm: names."""
    server = start(tmp_path, ["-np", "1", "-c", "1024", "--api-key", "k-9d1"],
                   {"AIP_MODE": "PREDICTION", "AIP_HEALTH_ROUTE": "/health"})
    try:
        metrics = requests.get(server.url("/metrics"), timeout=10)
        assert metrics.status_code == 200
        assert "vllm:num_requests_waiting" in metrics.text and "llamacpp:prompt_tokens_total" in metrics.text
        assert requests.get(server.url("/props"), timeout=10).status_code == 401  # the rest still needs the key
    finally:
        server.stop()


def test_no_secret_reaches_the_log(tmp_path: Path) -> None:
    token, key = "hf_SentinelToken4b1e", "sk-SentinelKey93ac"
    server = start(tmp_path, ["--hf-token", token, "--api-key", key, "-np", "1", "-c", "1024", "--verbose"],
                   {"AIP_MODE": "PREDICTION"})
    try:
        headers = {"Authorization": f"Bearer {key}"}
        assert requests.post(server.url("/v1/chat/completions"), json=CHAT, headers=headers, timeout=60).ok
        assert requests.post(server.url("/tokenize"), json={"content": "x"}, timeout=30).status_code == 401
    finally:
        assert server.stop() == 0, server.log()
    log = server.log()
    assert "settings:" in log and "(set, hidden)" in log  # the line is there, the token hidden in it
    assert token not in log and key not in log


@pytest.mark.parametrize(("args", "env", "named"), [
    (["--api-key", ","], {}, "--api-key"),
    ([], {"LLAMA_API_KEY": ""}, "LLAMA_API_KEY"),
])
def test_a_blank_key_stops_the_start(args: list[str], env: dict[str, str], named: str) -> None:
    result = subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env=clean_environment(env))
    assert result.returncode == 2
    assert named in result.stderr and "empty" in result.stderr
