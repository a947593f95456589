"""The Vertex AI predict route on the real server."""

from __future__ import annotations

from typing import Any

import requests

from tests.integration.conftest import Server

CHAT = {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": "Say hello"}],
        "max_tokens": 8, "temperature": 0}


def predict(server: Server, body: Any) -> requests.Response:
    return requests.post(server.url("/predict"), json=body, timeout=120)


def test_a_mix_of_good_and_bad_instances(vertex_server: Server) -> None:
    response = predict(vertex_server, {"instances": [
        CHAT,
        {"@requestFormat": "tokenize", "content": "hello"},
        {"@requestFormat": "applyTemplate", "messages": [{"role": "user", "content": "Hi"}]},
        {"@requestFormat": "health"},
        {"@requestFormat": "/v1/completions", "prompt": "Hi", "max_tokens": 3},
        {"@requestFormat": "completions", "prompt": "Hi", "n_predict": 3},
        {"@requestFormat": "noSuchThing"},
        "not an object",
        {"@requestFormat": "chatCompletions", "messages": "wrong"},
        {**CHAT, "stream": True},
    ]})
    assert response.status_code == 200
    p = response.json()["predictions"]
    assert len(p) == 10
    assert p[0]["object"] == "chat.completion" and p[0]["choices"][0]["message"]["content"]
    assert p[1] == requests.post(vertex_server.url("/tokenize"), json={"content": "hello"}, timeout=10).json()
    assert p[2]["prompt"].endswith("<|im_start|>assistant\n")
    assert p[3] == {"status": "ok"}
    assert p[4]["object"] == "text_completion"
    assert "stop_type" in p[5]  # the alias "completions" is the native route (first in the table)
    assert p[6]["error"] == {"code": 400, "message": "no handler registered for @requestFormat: noSuchThing",
                             "type": "invalid_request_error"}
    assert p[7]["error"]["message"] == "each instance must be a JSON object"
    assert p[8]["error"]["code"] == 400 and "messages" in p[8]["error"]["message"]
    assert p[9]["object"] == "chat.completion"  # stream forced off
    assert p[9]["choices"][0]["message"]["content"] == p[0]["choices"][0]["message"]["content"]


def test_an_instance_over_the_context_keeps_its_error_fields(vertex_server: Server) -> None:
    body = {"instances": [{"@requestFormat": "completion", "prompt": "word " * 1500}, CHAT]}
    predictions = predict(vertex_server, body).json()["predictions"]
    assert predictions[0]["error"]["type"] == "exceed_context_size_error"
    assert predictions[0]["error"]["n_ctx"] == 1024
    assert predictions[1]["object"] == "chat.completion"


def test_envelope_errors(vertex_server: Server) -> None:
    cases = [
        (b"{nope", "not valid JSON"),
        (b"[]", "request body must be a JSON object"),
        (b'{"instances": 5}', "request body must include an array field named instances"),
    ]
    for data, message in cases:
        response = requests.post(vertex_server.url("/predict"), data=data, timeout=10,
                                 headers={"Content-Type": "application/json"})
        assert response.status_code == 400
        assert message in response.json()["error"]["message"]
    too_many = predict(vertex_server, {"instances": [{"@requestFormat": "health"}] * 129})
    assert too_many.status_code == 400
    assert too_many.json()["error"]["message"] == "instances array exceeds maximum size of 128"
    empty = predict(vertex_server, {"instances": []})
    assert empty.status_code == 200 and empty.json() == {"predictions": []}


def test_eight_chat_instances(vertex_server: Server) -> None:
    instances = [{**CHAT, "messages": [{"role": "user", "content": f"Count to {i}"}]} for i in range(8)]
    predictions = predict(vertex_server, {"instances": instances}).json()["predictions"]
    assert len(predictions) == 8
    assert all(p["choices"][0]["message"]["role"] == "assistant" for p in predictions)
    for index, instance in enumerate(instances):
        solo = requests.post(vertex_server.url("/v1/chat/completions"),
                             json={k: v for k, v in instance.items() if k != "@requestFormat"}, timeout=60).json()
        assert solo["choices"][0]["message"]["content"] == predictions[index]["choices"][0]["message"]["content"]
