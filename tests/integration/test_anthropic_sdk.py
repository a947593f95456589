"""The official anthropic SDK against /v1/messages, unchanged but for the base URL."""

from __future__ import annotations

import json

import anthropic
import pytest
import requests
from anthropic.types import MessageParam, TextBlock, ToolParam

from tests.integration.conftest import Server

WEATHER: ToolParam = {
    "name": "get_weather",
    "description": "Get the weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def client(vertex_server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=vertex_server.base, api_key="unused", max_retries=0)


def test_messages_create(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="m", max_tokens=16, system="You are terse.", extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"},
                  {"role": "user", "content": "How are you?"}],
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


def test_stop_sequences(client: anthropic.Anthropic) -> None:
    free = client.messages.create(model="m", max_tokens=30, extra_body={"temperature": 0},
                                  messages=[{"role": "user", "content": "Count from one to ten in words."}])
    text = free.content[0].text  # type: ignore[union-attr]
    stop = text.split()[1] if len(text.split()) > 1 else text[:2]
    stopped = client.messages.create(model="m", max_tokens=30, extra_body={"temperature": 0}, stop_sequences=[stop],
                                     messages=[{"role": "user", "content": "Count from one to ten in words."}])
    assert stopped.stop_reason == "stop_sequence"
    assert stopped.stop_sequence == stop
    assert stopped.content[0].text == text[: text.index(stop)]  # type: ignore[union-attr]


def test_messages_stream(client: anthropic.Anthropic) -> None:
    messages: list[MessageParam] = [{"role": "user", "content": "Tell me a joke."}]
    whole = client.messages.create(model="m", max_tokens=16, extra_body={"temperature": 0}, messages=messages)
    with client.messages.stream(model="m", max_tokens=16, extra_body={"temperature": 0}, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert isinstance(whole.content[0], TextBlock) and isinstance(final.content[0], TextBlock)
    assert text == whole.content[0].text
    assert final.content[0].text == text
    assert final.stop_reason == whole.stop_reason


def test_raw_stream_event_order(vertex_server: Server) -> None:
    body = {"max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    with requests.post(vertex_server.url("/v1/messages"), json=body, stream=True, timeout=60) as response:
        events = [line[len("event: "):] for line in response.iter_lines(decode_unicode=True)
                  if line.startswith("event: ")]
    assert events[0] == "message_start"
    assert events[1] == "content_block_start"
    assert "content_block_delta" in events
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]


def test_count_tokens(client: anthropic.Anthropic, vertex_server: Server) -> None:
    counted = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "Count me"}])
    prompt = requests.post(vertex_server.url("/apply-template"),
                           json={"messages": [{"role": "user", "content": "Count me"}]}, timeout=10).json()["prompt"]
    tokens = requests.post(vertex_server.url("/tokenize"), json={"content": prompt}, timeout=10).json()["tokens"]
    assert counted.input_tokens == len(tokens)


def test_tool_use(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="m", max_tokens=100, tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "What's the weather in Lisbon?"}],
    )
    assert message.stop_reason == "tool_use"
    uses = [block for block in message.content if block.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather"
    assert isinstance(uses[0].input, dict) and isinstance(uses[0].input["city"], str)
    follow_up = client.messages.create(
        model="m", max_tokens=20, tools=[WEATHER],
        messages=[
            {"role": "user", "content": "What's the weather in Lisbon?"},
            {"role": "assistant", "content": message.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                          "content": json.dumps({"sky": "sunny"})}]},
        ],
    )
    assert follow_up.content


def test_bad_input_is_a_400(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="m", max_tokens=10,
                               messages=[{"role": "wizard", "content": "hi"}])  # type: ignore[misc,list-item]


def test_an_empty_conversation_is_answered_as_llama_server_answers_it(client: anthropic.Anthropic,
                                                                      vertex_server: Server) -> None:
    """No messages at all: the prompt is the template's generation prompt alone, and the model answers it
    (llama-server does the same on /v1/messages and /v1/chat/completions)."""
    answer = client.messages.create(model="m", max_tokens=4, messages=[])
    assert answer.stop_reason == "max_tokens" and answer.usage.output_tokens == 4
    chat = requests.post(vertex_server.url("/v1/chat/completions"), timeout=60,
                         json={"messages": [], "max_tokens": 4}).json()
    assert chat["usage"]["completion_tokens"] == 4
    rendered = requests.post(vertex_server.url("/apply-template"), json={"messages": []}, timeout=10).json()
    assert rendered["prompt"] == "<|im_start|>assistant\n"  # the embedded model's template, with nothing before
