"""The input shapes llama-server's embedding routes take: strings, token ids mixed with strings,
lists of them, OpenAI content entries; "content" on /v1/embeddings answers in the native shape;
embd_normalize on both routes."""

from __future__ import annotations

import math
from typing import Any

import pytest
from flask.testing import FlaskClient


def embed(client: FlaskClient, path: str, **body: Any) -> Any:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.json


def test_one_prompt_of_ids_mixed_with_strings_is_one_input(client: FlaskClient) -> None:
    assert len(embed(client, "/v1/embeddings", input=["Hello", 40, 41, "world"])["data"]) == 1
    assert len(embed(client, "/v1/embeddings", input=["Hello", "world"])["data"]) == 2
    assert len(embed(client, "/v1/embeddings", input=[[40, 41], "world", ["a", 42]])["data"]) == 3


def test_openai_content_entries_are_embedded_as_their_text(client: FlaskClient) -> None:
    parts = embed(client, "/v1/embeddings", input={"content": [{"type": "text", "text": "Hello"}]})["data"]
    plain = embed(client, "/v1/embeddings", input="Hello")["data"]
    assert parts[0]["embedding"] == plain[0]["embedding"]
    image = client.post("/v1/embeddings", json={"input": {"content": [{"type": "image_url", "image_url": {}}]}})
    assert image.status_code == 400 and "input.content.0" in image.get_json()["error"]["message"]


def test_content_on_the_openai_route_answers_in_the_native_shape(client: FlaskClient) -> None:
    native = embed(client, "/v1/embeddings", content="Hello")
    assert isinstance(native, list) and native[0]["index"] == 0 and isinstance(native[0]["embedding"][0], list)
    assert native == embed(client, "/embedding", content="Hello")
    missing = client.post("/v1/embeddings", json={"model": "x"})
    assert missing.status_code == 400
    assert '"input" or "content" must be provided' in missing.get_json()["error"]["message"]


@pytest.mark.parametrize("norm", [-1, 1, 2])
def test_embd_normalize_on_the_openai_route(client: FlaskClient, norm: int) -> None:
    vector = embed(client, "/v1/embeddings", input="Hello", embd_normalize=norm)["data"][0]["embedding"]
    if norm == 1:
        assert math.isclose(sum(abs(x) for x in vector), 1.0, rel_tol=1e-4)
    elif norm == 2:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-4)
    else:
        raw = embed(client, "/embedding", content="Hello", embd_normalize=-1)[0]["embedding"][0]
        assert vector == raw


def test_empty_inputs_are_refused(client: FlaskClient) -> None:
    bodies: list[dict[str, Any]] = [{"input": []}, {"input": ""}, {"input": [""]}, {"input": {"nope": 1}}]
    for body in bodies:
        response = client.post("/v1/embeddings", json=body)
        assert response.status_code == 400 and "input" in response.get_json()["error"]["message"], body
