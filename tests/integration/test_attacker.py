"""The attacker's suite: hostile requests against one real server (Vertex AI mode, an API key, media
URLs and slot files on, as an operator might run it), each answered with a 4xx that names what was
wrong, and after every one the same worker still serving. docs/security.md says what each guard is;
the other integration tests go deeper into each."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from app.handlers.request_limits import MAX_LOGIT_BIAS, MAX_STOP_STRINGS
from tests.integration.conftest import Server, start

KEY = "attacker-suite-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def target(server_dir: Path) -> Iterator[Server]:
    slots = server_dir / "attacker-slots"
    slots.mkdir()
    server = start(server_dir, ["-np", "2", "-c", "2048", "--api-key", KEY, "--media-urls", "--slot-save-path",
                                str(slots)], {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "/predict"})
    yield server
    assert server.stop() == 0, server.log()


def workers(server: Server) -> list[str]:
    return re.findall(r"Booting worker with pid: (\d+)", server.log())


def send(server: Server, method: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.request(method, server.url(path), headers={**AUTH, **kwargs.pop("headers", {})}, timeout=120,
                            **kwargs)


ATTACKS: list[tuple[str, str, str, dict[str, Any], int, str]] = [
    # (name, method, path, request, status, what the message names)
    ("a schema whose maxLength crashed llama.cpp's parser", "POST", CHAT, {"json": {
        "messages": HI, "max_tokens": 4, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "minLength": 30000}}}}}, 400, "minLength"),
    ("a grammar nested 100,000 deep", "POST", "/completion", {"json": {
        "prompt": "x", "n_predict": 1, "grammar": "root ::= " + "(" * 100_000 + "\"a\"" + ")" * 100_000}}, 400,
     "grammar"),
    ("n_probs of a whole vocabulary", "POST", "/completion", {"json": {"prompt": "x", "n_predict": 1,
                                                                       "n_probs": 150_000}}, 400, "n_probs"),
    ("too many stop strings", "POST", "/completion", {"json": {"prompt": "x", "n_predict": 1,
                                                               "stop": ["s"] * (MAX_STOP_STRINGS + 1)}}, 400, "stop"),
    ("too many biased tokens", "POST", "/completion", {"json": {"prompt": "x", "n_predict": 1, "logit_bias": [
        [token, 1.0] for token in range(MAX_LOGIT_BIAS + 1)]}}, 400, "logit_bias"),
    ("a token outside the vocabulary", "POST", "/detokenize", {"json": {"tokens": [10**9]}}, 400, "tokens"),
    ("JSON nested 100,000 deep", "POST", CHAT, {"data": b"[" * 100_000}, 400, "nested too deeply"),
    ("invalid UTF-8", "POST", CHAT, {"data": b'{"messages": "\xff\xfe"}'}, 400, "UTF-8"),
    ("NaN", "POST", "/completion", {"data": b'{"prompt": "x", "temperature": NaN}'}, 400, "NaN"),
    ("a body over the limit", "POST", CHAT, {"data": b"x" * (11 * 1024 * 1024)}, 413, "too large"),
    ("the metadata server as an image", "POST", CHAT, {"json": {"max_tokens": 2, "messages": [{"role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "http://169.254.169.254/computeMetadata/v1/"}}]}]}},
     400, "projector"),
    ("a slot file outside --slot-save-path", "POST", "/slots/0?action=save", {"json": {"filename": "../escape.bin"}},
     400, "filename"),
    ("a path outside the web UI", "GET", "/../../etc/passwd", {}, 404, "Not Found"),
    ("the slots through predict", "POST", "/predict", {"json": {"instances": [{"@requestFormat": "slots"}]}}, 200,
     "no handler"),
    ("no API key", "GET", "/props", {"headers": {"Authorization": "Bearer wrong"}}, 401, "Invalid API Key"),
]


@pytest.mark.parametrize(("name", "method", "path", "request_", "status", "named"), ATTACKS,
                         ids=[attack[0] for attack in ATTACKS])
def test_a_hostile_request_is_refused_and_the_worker_stays(target: Server, name: str, method: str, path: str,
                                                            request_: dict[str, Any], status: int, named: str) -> None:
    before = workers(target)
    answer = send(target, method, path, **dict(request_))
    assert answer.status_code == status, (name, answer.status_code, answer.text[:300])
    assert named.lower() in answer.text.lower(), (name, answer.text[:300])
    assert send(target, "GET", "/health").status_code == 200
    assert workers(target) == before, target.log()[-2000:]


def test_another_clients_stream_is_neither_read_nor_stopped_without_its_token(server_dir: Path) -> None:
    """On a server without API keys, a conversation id is not enough (with keys, the key is)."""
    open_server = start(server_dir, ["-np", "1", "-c", "1024"])
    try:
        body = {"messages": HI, "max_tokens": 600, "stream": True}
        with requests.post(open_server.url(CHAT), json=body, headers={"X-Conversation-Id": "victim"}, stream=True,
                           timeout=120) as victim:
            lines = victim.iter_lines()
            next(line for line in lines if line.startswith(b"data: "))  # live
            for method in ("GET", "DELETE"):
                answer = requests.request(method, open_server.url("/v1/stream"), params={"conv_id": "victim"},
                                          timeout=60)
                assert answer.status_code == 403 and answer.json()["error"]["type"] == "permission_error"
            hijack = requests.post(open_server.url(CHAT), json={**body, "max_tokens": 2},
                                   headers={"X-Conversation-Id": "victim"}, timeout=120)
            assert hijack.status_code == 403 and hijack.json()["error"]["type"] == "permission_error"
            stop = {"conv_id": "victim", "token": victim.headers["X-Stream-Token"]}
            assert requests.delete(open_server.url("/v1/stream"), params=stop, timeout=60).status_code == 204
            del lines
    finally:
        assert open_server.stop() == 0, open_server.log()
