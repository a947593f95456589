"""Responses input items and Anthropic content blocks are validated by their schemas: a wrong type
is a 400 naming the field (never read as text), an unknown item or block type is a 400 that says
what is taken, and the supported items still make the conversation."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.inprocess import PROMPT


def error_of(client: FlaskClient, path: str, body: dict[str, Any]) -> str:
    response = client.post(path, json=body)
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert response.json is not None and response.json["error"]["type"] == "invalid_request_error"
    message: str = response.json["error"]["message"]
    return message


@pytest.mark.parametrize(("body", "expected"), [
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
     "Field 'input.0.content.0.text': Input should be a valid string"),
    ({"input": [{"type": "bogus"}]}, "Field 'input.0': unknown input item type"),
    ({"input": [{"role": "robot", "content": "x"}]}, "Field 'input.0.role'"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "Field 'input.0.call_id': Field required"),
])
def test_bad_responses_items_are_400s_naming_the_field(client: FlaskClient, body: dict[str, Any],
                                                       expected: str) -> None:
    assert expected in error_of(client, "/v1/responses", body)


@pytest.mark.parametrize(("content", "expected"), [
    ([{"type": "text", "text": 5}], "Field 'messages.0.content.0.text': Input should be a valid string"),
    ([{"type": "image", "source": {"type": "base64", "data": "AA=="}}],
     "Field 'messages.0.content.0.source': this model has no multimodal projector: start the server with --mmproj"),
    ([{"type": "image", "source": {"type": "file", "file_id": "f"}}],
     "Field 'messages.0.content.0.source': must be a base64 source"),
    ([{"type": "tool_result", "tool_use_id": "t1", "content": "x"}], ""),
])
def test_bad_anthropic_blocks_are_400s_naming_the_field(client: FlaskClient, content: list[Any],
                                                        expected: str) -> None:
    body = {"max_tokens": 8, "messages": [{"role": "assistant" if expected == "" else "user", "content": content}]}
    message = error_of(client, "/v1/messages", body)
    assert expected in message and "messages.0.content.0" in message


def test_a_tool_conversation_in_either_dialect_reaches_the_prompt(client: FlaskClient) -> None:
    responses = {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": {"temp": 3}},
        {"type": "reasoning", "summary": []},
        {"role": "user", "content": PROMPT},
    ]}
    def tokens(path: str, body: dict[str, Any]) -> int:
        counted = client.post(path, json=body).json
        assert counted is not None
        return int(counted["input_tokens"])

    alone = tokens("/v1/responses/input_tokens", {"input": [{"role": "user", "content": PROMPT}]})
    # the call, its output and the question add their text (the reasoning item adds nothing)
    assert tokens("/v1/responses/input_tokens", responses) > alone + len("Weather?get_weatherOslo3")
    anthropic = {"max_tokens": 8, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather",
                                           "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "3 degrees"}]},
                                     {"type": "text", "text": PROMPT}]},
    ]}
    reply = client.post("/v1/messages", json=anthropic).json
    assert reply is not None and reply["type"] == "message" and reply["content"][0]["type"] == "text"
    only_last = {"max_tokens": 8, "messages": [{"role": "user", "content": PROMPT}]}
    assert (tokens("/v1/messages/count_tokens", anthropic)
            > tokens("/v1/messages/count_tokens", only_last) + len("Weather?get_weather3 degrees"))
