"""Functionary v3.2's replies on the real model, with its own template (app/handlers/recipients.py): the template
renders the tools itself; an answer written to ``all`` (under a grammar, as Functionary writes it after the
prompt's ``>>>``) arrives without its recipient line, streamed or not; a forced call arrives as a tool call
through the OpenAI SDK, as llama-server's Functionary v3.2 parser reads them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.chats import forced_call, streamed_chat, template_server
from tests.integration.conftest import Server

BODY = {"messages": [{"role": "user", "content": "Is it raining?"}], "grammar": 'root ::= "all\\n" "It is sunny."',
        "max_tokens": 40, "temperature": 0}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def server(server_dir: Path) -> Iterator[Server]:
    with template_server(server_dir, "meetkai-functionary-medium-v3.2") as running:
        yield running


def test_the_template_renders_the_tools_itself(server: Server) -> None:
    prompt = requests.post(server.url("/apply-template"), json={"messages": BODY["messages"], "tools": [WEATHER]},
                           timeout=30).json()["prompt"]
    assert "type get_weather = (_: {" in prompt and prompt.endswith(">>>")
    assert "You can call the following tools" not in prompt  # not this server's generic description


def test_an_answer_to_all_arrives_without_its_recipient(server: Server) -> None:
    raw = requests.post(server.url("/completion"), timeout=120, json={
        "prompt": requests.post(server.url("/apply-template"), json=BODY, timeout=30).json()["prompt"],
        "grammar": BODY["grammar"], "n_predict": 40, "temperature": 0}).json()["content"]
    assert raw == "all\nIt is sunny."  # what the model wrote
    message = requests.post(server.url("/v1/chat/completions"), json=BODY, timeout=120).json()["choices"][0]["message"]
    assert message["content"] == raw.removeprefix("all\n")
    assert streamed_chat(server, BODY)[1] == message["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_arrives_as_a_tool_call(server: Server, stream: bool) -> None:
    name, arguments, _ = forced_call(server, WEATHER, "Weather in Paris?", stream)
    assert name == "get_weather" and json.loads(arguments)["city"] in ("Paris", "Oslo")


def test_a_call_in_the_history_keeps_its_arguments_text(server: Server) -> None:
    """The template adds a call's arguments to a string, so they reach it as the client sent them (as
    llama-server: it parses them only for a template that takes objects); the chat on that history is answered."""
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    caps = requests.get(server.url("/props"), timeout=10).json()["chat_template_caps"]
    assert caps["supports_object_arguments"] is False
    prompt = requests.post(server.url("/apply-template"), json={"messages": messages, "tools": [WEATHER]},
                           timeout=30).json()["prompt"]
    assert '>>>get_weather\n{"city": "Paris"}' in prompt
    reply = requests.post(server.url("/v1/chat/completions"), timeout=120,
                          json={"messages": messages, "tools": [WEATHER], "max_tokens": 8})
    assert reply.status_code == 200, reply.text[:300]


def test_a_prefilled_answer_goes_on_after_its_recipient(server: Server) -> None:
    """As llama-server: the prompt opens the answer's message (``>>>all``), so what the model writes is the
    answer, even a line that names a function."""
    messages = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Call"}]
    prompt = requests.post(server.url("/apply-template"), json={"messages": messages}, timeout=30).json()["prompt"]
    assert prompt.endswith(">>>all\nCall")
    body = {"messages": messages, "grammar": 'root ::= " get_weather\\n{\\"city\\": \\"Paris\\"}"', "max_tokens": 20,
            "temperature": 0}
    message = requests.post(server.url("/v1/chat/completions"), json=body, timeout=120).json()["choices"][0]["message"]
    assert message["content"] == ' get_weather\n{"city": "Paris"}' and not message.get("tool_calls")
    assert streamed_chat(server, body)[1] == message["content"]
