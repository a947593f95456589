"""The route table's switches: a route whose setting is off answers 501 naming the flag (as
llama-server), checked in one place for every route, the Vertex fan-out included."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient

from app.handlers.routes import GENERATION, ROUTES, RouteSpec
from app.server.wiring import Application
from tests.inprocess import PROMPT, make_application


def concrete(path: str) -> str:
    return path.replace(":id_slot", "0") + ("?action=save" if ":id_slot" in path else "")


def switched_off(application: Application) -> list[RouteSpec]:
    settings = application.context.settings
    return [spec for spec in ROUTES if spec.requires is not None and not spec.requires.is_on(settings)]


def test_every_switched_off_route_answers_501_naming_its_flag(application: Application, client: FlaskClient) -> None:
    off = switched_off(application)
    assert {spec.path for spec in off} >= {"/metrics", "/props", "/rerank", "/slots/:id_slot"}
    for spec in off:
        response = client.open(concrete(spec.path), method=spec.method, json={})
        assert response.status_code == 501, spec.path
        assert response.json is not None and response.json["error"]["message"] == spec.requires.message  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def embedding_only() -> Iterator[Application]:
    built = make_application("--embeddings")
    yield built
    built.shutdown()


def test_an_embedding_only_server_refuses_every_generation_route(embedding_only: Application) -> None:
    client = embedding_only.flask.test_client()
    generating = [spec for spec in ROUTES if spec.requires is GENERATION]
    assert len(generating) == 12
    for spec in generating:
        response = client.post(spec.path, json={"prompt": PROMPT, "messages": [{"role": "user", "content": "x"}]})
        assert response.status_code == 501 and response.json is not None, spec.path
        assert "--embeddings" in response.json["error"]["message"]
    assert client.post("/embedding", json={"content": PROMPT}).status_code == 200
    assert client.post("/tokenize", json={"content": PROMPT}).status_code == 200
