"""Bad input against the real server: a 4xx naming the problem, and the server keeps serving."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tests.integration.conftest import Server


def post_raw(server: Server, path: str, data: bytes) -> requests.Response:
    return requests.post(server.url(path), data=data, headers={"Content-Type": "application/json"}, timeout=60)


def post(server: Server, path: str, body: Any) -> requests.Response:
    return requests.post(server.url(path), json=body, timeout=60)


def assert_error(response: requests.Response, status: int, kind: str, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status and error["type"] == kind
    for word in words:
        assert word in error["message"], error["message"]
    assert isinstance(error, dict)
    return error


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"},
         ["temperature"]),
        ("/v1/chat/completions", {"messages": "hello"}, ["messages"]),
        ("/v1/chat/completions", {}, ["messages"]),
        ("/v1/chat/completions", {"messages": [{}]}, ["messages.0"]),
        ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, ["messages.0.role"]),
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, ["messages.0.content"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": -7},
         ["max_tokens"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 9}, ["n"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 0}, ["n"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True,
                                  "top_logprobs": 21}, ["top_logprobs"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
         ["top_logprobs"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "response_format": {"type": "sound"}}, ["response_format"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "response_format": {"type": "json_schema", "json_schema": {"schema": 123}}},
         ["response_format.json_schema.schema"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
         ["response_format.json_schema.schema"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "response_format": {"type": "json_schema",
                                                      "json_schema": {"schema": {"type": 123}}}},
         ["invalid JSON schema"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "tools": [{"type": "function", "function": {"name": "get_weather"}}],
                                  "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         ["tool_choice", "nope"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes",
                                  "tools": [{"type": "function", "function": {"name": "f"}}]}, ["tool_choice"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "grammar": 'root ::= "a"',
                                  "tools": [{"type": "function", "function": {"name": "f"}}]}, ["grammar", "tools"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
                                  "response_format": {"type": "json_object"},
                                  "tools": [{"type": "function", "function": {"name": "f"}}]},
         ["response_format", "forced tool calls"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "tools": [{"type": "function", "function": {}}]}, ["tools.0.function.name"]),
        ("/completion", {"prompt": "x", "grammar": "root ::= ("}, ["grammar"]),
        ("/completion", {"prompt": "x", "samplers": ["top_k", "wizardry"]}, ["samplers"]),
        ("/completion", {"prompt": "x", "dry_sequence_breakers": []}, ["dry_sequence_breakers"]),
        ("/completion", {"prompt": "x", "n_indent": -1}, ["n_indent"]),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
         ["image_url"]),
        ("/completion", {"n_predict": 4}, ["prompt"]),
        ("/completion", {"prompt": {"nested": True}}, ["prompt"]),
        ("/completion", {"prompt": "x", "stop": 5}, ["stop"]),
        ("/completion", {"prompt": "x", "seed": "lucky"}, ["seed"]),
        ("/completion", {"prompt": [999999]}, ["invalid tokens"]),
        ("/completion", {"prompt": ""}, ["empty"]),
        ("/completion", {"prompt": "x", "id_slot": 99}, ["slot"]),
        ("/v1/completions", {"prompt": "x", "max_tokens": 1.5}, ["max_tokens"]),
        ("/tokenize", {"content": 12.5}, ["content"]),
        ("/detokenize", {"tokens": [1, "two"]}, ["tokens"]),
        ("/detokenize", {"tokens": [10**9]}, ["tokens"]),
        ("/apply-template", {"messages": [{"content": "no role"}]}, ["role"]),
    ],
)
def test_bad_fields_are_400_naming_the_field(
    vertex_server: Server, path: str, body: dict[str, Any], words: list[str]
) -> None:
    assert_error(post(vertex_server, path, body), 400, "invalid_request_error", *words)


@pytest.mark.parametrize("data", [b"{not json", b'{"prompt": "x"', b'{"prompt": NaN}', b"\xff\xfe"])
def test_malformed_bodies_are_400(vertex_server: Server, data: bytes) -> None:
    assert_error(post_raw(vertex_server, "/completion", data), 400, "invalid_request_error")


def test_a_body_that_is_not_an_object_is_400(vertex_server: Server) -> None:
    assert_error(post(vertex_server, "/v1/chat/completions", [1, 2]), 400, "invalid_request_error", "object")


def test_a_prompt_over_the_slot_context_is_exceed_context_size_error(vertex_server: Server) -> None:
    long_text = "word " * 1500
    for path, body in (
        ("/completion", {"prompt": long_text}),
        ("/completion", {"prompt": long_text, "stream": True}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": long_text}]}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": long_text}], "stream": True}),
    ):
        error = assert_error(post(vertex_server, path, body), 400, "exceed_context_size_error", "exceeds")
        assert error["n_ctx"] == 1024
        assert error["n_prompt_tokens"] > 1024


def test_unknown_routes_and_methods(vertex_server: Server) -> None:
    assert_error(requests.get(vertex_server.url("/no/such/route"), timeout=10), 404, "not_found_error",
                 "File Not Found")
    assert_error(requests.get(vertex_server.url("/completion"), timeout=10), 405, "invalid_request_error",
                 "POST")
    assert_error(requests.post(vertex_server.url("/health"), timeout=10), 405, "invalid_request_error", "GET")


def test_unknown_fields_are_accepted(vertex_server: Server) -> None:
    response = post(vertex_server, "/completion", {"prompt": "Hi", "n_predict": 2, "some_future_field": {"x": 1}})
    assert response.status_code == 200


def test_the_server_keeps_serving_after_bad_input(vertex_server: Server) -> None:
    for _ in range(3):
        post_raw(vertex_server, "/v1/chat/completions", b"{broken")
    response = post(vertex_server, "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    assert response.status_code == 200
    slots = requests.get(vertex_server.url("/slots"), timeout=10).json()
    assert not any(slot["is_processing"] for slot in slots)


def test_a_grammar_beside_tools_that_may_not_be_called_is_taken(vertex_server: Server) -> None:
    """As llama-server: a custom grammar is refused beside tools the model may call (above), and taken where
    ``tool_choice`` is none."""
    reply = post(vertex_server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "grammar": 'root ::= "yes"', "tool_choice": "none",
        "max_tokens": 4, "tools": [{"type": "function", "function": {"name": "f"}}]})
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "yes"
