"""Every route of the table, in process on the fake backend with its switches on: each answers
200 with the body its dialect promises (JSON, Prometheus text or SSE). Runs in a second."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.handlers.routes import ROUTES
from app.server.wiring import Application
from tests.inprocess import PROMPT, make_application

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
BODIES: dict[str, dict[str, Any]] = {
    "/props": {}, "/tools": {"tool": "get_info"},
    "/completion": {"prompt": PROMPT, "n_predict": 4}, "/completions": {"prompt": PROMPT, "n_predict": 4},
    "/v1/completions": {"prompt": PROMPT, "max_tokens": 4}, "/chat/completions": CHAT, "/v1/chat/completions": CHAT,
    "/chat/completions/input_tokens": CHAT, "/v1/chat/completions/input_tokens": CHAT,
    "/v1/responses": {"input": PROMPT, "max_output_tokens": 4}, "/responses": {"input": PROMPT, "max_output_tokens": 4},
    "/responses/input_tokens": {"input": PROMPT}, "/v1/responses/input_tokens": {"input": PROMPT},
    "/v1/messages": {"max_tokens": 4, **CHAT}, "/v1/messages/count_tokens": {"max_tokens": 4, **CHAT},
    "/infill": {"input_prefix": "def f(", "input_suffix": ")", "prompt": PROMPT, "n_predict": 4},
    "/embedding": {"content": "Hi"}, "/embeddings": {"content": "Hi"}, "/v1/embeddings": {"input": "Hi"},
    "/rerank": {"query": "a", "documents": ["b"]}, "/reranking": {"query": "a", "documents": ["b"]},
    "/v1/rerank": {"query": "a", "documents": ["b"]}, "/v1/reranking": {"query": "a", "documents": ["b"]},
    "/tokenize": {"content": "Hi"}, "/detokenize": {"tokens": [80, 115]}, "/apply-template": CHAT,
    "/lora-adapters": [],  # type: ignore[dict-item]
    "/slots/:id_slot": {"filename": "slot0.bin"},
    "/v1/chat/completions/control": {"id": "chatcmpl-none", "action": "reasoning_end"},
    "/v1/streams/lookup": {"conversation_ids": ["every-route"]},
}
QUERIES = {"/v1/stream": "?conv_id=every-route"}  # a session the fixture's stream made
RERANK = {"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"}  # --reranking makes an embedding-only server
AUDIO = {"/v1/audio/transcriptions", "/audio/transcriptions"}  # need an audio projector: tests/integration


@pytest.fixture(scope="module")
def switched_on(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Application]:
    slots = tmp_path_factory.mktemp("slots")
    built = make_application("--metrics", "--props", "--slot-save-path", str(slots), "--tools", "get_info",
                             "--ui-mcp-proxy")
    resumable = built.flask.test_client().post("/completion", json={"prompt": PROMPT, "n_predict": 4, "stream": True},
                                               headers={"X-Conversation-Id": "every-route"})
    assert resumable.status_code == 200 and "data: " in resumable.get_data(as_text=True)
    QUERIES["/v1/stream"] += "&token=" + resumable.headers["X-Stream-Token"]  # the starter reads it back
    yield built
    built.shutdown()


@pytest.mark.parametrize("spec", [spec for spec in ROUTES if spec.path not in RERANK | AUDIO],
                         ids=lambda spec: f"{spec.method} {spec.path}")
def test_every_route_answers(switched_on: Application, spec: Any) -> None:
    client = switched_on.flask.test_client()
    path = spec.path.replace(":id_slot", "0") + ("?action=save" if ":id_slot" in spec.path else "")
    path += QUERIES.get(spec.path, "")
    if spec.method == "DELETE":
        assert client.delete(spec.path + "?conv_id=nothing-here").status_code == 204
        return
    response = client.get(path) if spec.method == "GET" else client.post(path, json=BODIES.get(spec.path, {}))
    if spec.path == "/cors-proxy":  # on, but no url to go to (tests/integration/test_agent_mode.py proxies)
        assert response.status_code == 400 and response.get_json()["error"]["message"] == \
            "invalid target URL: missing host"
        return
    assert response.status_code == 200, (spec.path, response.get_data(as_text=True)[:300])
    if spec.path == "/metrics":
        assert "llamacpp:" in response.get_data(as_text=True)
    elif spec.path == "/v1/stream":
        assert response.mimetype == "text/event-stream" and "data: " in response.get_data(as_text=True)
    else:
        assert response.is_json and response.json is not None


def test_the_rerank_routes_answer_on_a_reranking_server() -> None:
    built = make_application("--reranking")
    try:
        client = built.flask.test_client()
        for path in sorted(RERANK):
            response = client.post(path, json=BODIES[path])
            assert response.status_code == 200, (path, response.get_data(as_text=True)[:300])
            assert response.json is not None and response.json["results"][0]["index"] == 0
    finally:
        built.shutdown()


def test_the_web_ui_is_at_the_root_unless_switched_off(client: FlaskClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert b'<script type="module" src="js/main.js">' in page.data
    assert client.get("/props").json["ui"] is True  # type: ignore[index]
    built = make_application("--no-ui")
    try:
        off = built.flask.test_client()
        assert off.get("/").status_code == 404
        assert off.get("/js/main.js").status_code == 404
        assert off.get("/props").json["ui"] is False  # type: ignore[index]
    finally:
        built.shutdown()


def test_transcription_without_an_audio_projector_is_a_501(switched_on: Application) -> None:
    client = switched_on.flask.test_client()
    for path in sorted(AUDIO):
        response = client.post(path, data={"model": "whisper-1"})
        assert response.status_code == 501, path
        assert response.get_json()["error"]["message"] == "The current model does not support audio input."
