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
        {**CHAT, "stream": False},
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
    assert p[9]["object"] == "chat.completion"
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
        (b'{"instances": [], "parameters": 3}', "parameters must be a JSON object"),
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


def sse_data(response: requests.Response) -> list[Any]:
    return [line[len("data: "):] for line in response.iter_lines(decode_unicode=True) if line.startswith("data: ")]


def test_parameters_are_merged_and_integral_floats_become_integers(vertex_server: Server) -> None:
    body = {"instances": [
        {"@requestFormat": "completion", "prompt": "Once upon a time"},
        {"@requestFormat": "completion", "prompt": "Once upon a time", "n_predict": 2.0},
        {"@requestFormat": "detokenize", "tokens": [19556.0, 905.0]},
    ], "parameters": {"n_predict": 5.0, "temperature": 0.0}}
    p = predict(vertex_server, body).json()["predictions"]
    assert p[0]["tokens_predicted"] == 5 and p[0]["generation_settings"]["temperature"] == 0
    assert p[1]["tokens_predicted"] == 2  # the instance's own key wins
    assert p[2]["content"] == requests.post(vertex_server.url("/detokenize"), json={"tokens": [19556, 905]},
                                            timeout=10).json()["content"]


def test_instances_without_a_format_are_routed_by_shape(vertex_server: Server) -> None:
    p = predict(vertex_server, {"instances": [
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
        {"prompt": "Hello", "max_tokens": 3, "temperature": 0},
        {"prompt": "Hello", "max_tokens": 3, "temperature": 0, "raw_response": True},
        {"inputs": "Hello", "parameters": {"max_new_tokens": 3, "do_sample": False}},
        {"text": "neither"},
    ]}).json()["predictions"]
    assert p[0]["object"] == "chat.completion"
    assert isinstance(p[2], str) and p[1] == f"Prompt:\nHello\nOutput:\n{p[2]}"  # Model Garden vLLM's answer
    assert p[3] == p[2]  # TGI's: the text; greedy, the same three tokens
    assert p[4]["error"]["message"] == "each instance must include a string @requestFormat"


def test_raw_predict_answers_like_the_default_route(vertex_server: Server) -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
    raw = requests.post(vertex_server.url("/predict"), json=body, timeout=60)
    direct = requests.post(vertex_server.url("/v1/chat/completions"), json=body, timeout=60)
    assert raw.status_code == 200 and "predictions" not in raw.json()
    assert raw.json()["choices"][0]["message"] == direct.json()["choices"][0]["message"]
    bad = requests.post(vertex_server.url("/predict"), json={"messages": "nope"}, timeout=60)
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]


def test_stream_raw_predict(vertex_server: Server) -> None:
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0, "stream": True}
    with requests.post(vertex_server.url("/predict"), json=body, stream=True, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers["X-Accel-Buffering"] == "no"
        assert "Content-Encoding" not in response.headers
        data = sse_data(response)
    assert data[-1] == "[DONE]" and '"chat.completion.chunk"' in data[0]
    single = {"instances": [{**CHAT, "stream": True}]}
    with requests.post(vertex_server.url("/predict"), json=single, stream=True, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert sse_data(response)[-1] == "[DONE]"
    several = predict(vertex_server, {"instances": [CHAT, CHAT], "parameters": {"stream": True}})
    assert several.status_code == 400
    assert "streaming takes exactly one instance" in several.json()["error"]["message"]


def test_a_request_built_as_vertex_forwards_it_parses_back_as_a_predict_response(vertex_server: Server) -> None:
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format, struct_pb2

    request = aiplatform_v1.PredictRequest(endpoint="projects/p/locations/us-central1/endpoints/1")
    for instance in (
        {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        {"@requestFormat": "tokenize", "content": "hello", "with_pieces": True},
        {"@requestFormat": "metrics"},
    ):
        value = struct_pb2.Value()
        json_format.ParseDict(instance, value)
        request.instances.append(value)
    parameters = struct_pb2.Value()
    json_format.ParseDict({"temperature": 0}, parameters)
    request.parameters = parameters
    wire = json_format.MessageToDict(aiplatform_v1.PredictRequest.pb(request))
    assert wire["instances"][0]["max_tokens"] == 4.0  # protobuf Value numbers are doubles
    del wire["endpoint"]
    response = requests.post(vertex_server.url("/predict"), json=wire, timeout=60)
    assert response.status_code == 200
    parsed = aiplatform_v1.PredictResponse.pb(aiplatform_v1.PredictResponse.from_json(response.text))
    assert len(parsed.predictions) == 3
    chat = json_format.MessageToDict(parsed.predictions[0])
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] <= 4
    pieces = json_format.MessageToDict(parsed.predictions[1])["tokens"]
    assert pieces[0]["piece"] == "hello"
    assert parsed.predictions[2].string_value.startswith("# HELP llamacpp:")


def test_an_oversized_body_is_413(vertex_server: Server) -> None:
    big = b'{"instances": [{"@requestFormat": "tokenize", "content": "' + b"x" * (10 * 1024 * 1024) + b'"}]}'
    response = requests.post(vertex_server.url("/predict"), data=big, timeout=60,
                             headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == 413
    assert requests.get(vertex_server.url("/health"), timeout=10).status_code == 200


def test_the_slots_are_not_a_predict_alias_unless_asked(vertex_server: Server) -> None:
    """Without --predict-slots a predict caller reaches neither /slots nor its actions (every user's
    slots); the HTTP route itself answers as ever (tests/integration/test_embeddings_rerank_lora_slots.py
    runs a server with the flag)."""
    predictions = predict(vertex_server, {"instances": [{"@requestFormat": "slots"}, {"@requestFormat": "/slots"}]}
                          ).json()["predictions"]
    assert all("no handler" in prediction["error"]["message"] for prediction in predictions), predictions
    assert requests.get(vertex_server.url("/slots"), timeout=10).status_code == 200
