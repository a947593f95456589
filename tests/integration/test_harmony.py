"""gpt-oss's harmony replies (and Muse Glimmer's) on the real model, with their own templates
(app/handlers/harmony.py): a reply in channels (written under a grammar, as gpt-oss writes it) arrives with
the analysis as ``reasoning_content`` and the final channel as the content, streamed or not; a forced call
arrives as a tool call through the OpenAI SDK, as llama-server's gpt-oss parser reads them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.chats import forced_call, streamed_chat, template_server
from tests.integration.conftest import Server

GRAMMAR = ('root ::= "<|channel|>analysis<|message|>" "the user asks" "<|end|><|start|>assistant<|channel|>final'
           '<|message|>" "It rains."')
BODY = {"messages": [{"role": "user", "content": "Is it raining?"}], "grammar": GRAMMAR, "max_tokens": 100,
        "temperature": 0}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def server(server_dir: Path) -> Iterator[Server]:
    with template_server(server_dir, "openai-gpt-oss-120b") as running:
        yield running


def chat(server: Server, body: dict[str, object]) -> dict[str, object]:
    reply = requests.post(server.url("/v1/chat/completions"), json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    message = reply.json()["choices"][0]["message"]
    assert isinstance(message, dict)
    return message


def test_the_analysis_is_the_reasoning_and_the_final_channel_the_answer(server: Server) -> None:
    raw = str(chat(server, {**BODY, "reasoning_format": "none"})["content"])
    # none: the analysis stays, with its markers, as llama-server leaves it; the final channel's header does not
    assert raw == "<|channel|>analysis<|message|>the user asks<|end|>It rains."
    analysis, _, final = raw.partition("<|end|>")
    message = chat(server, BODY)
    assert message["reasoning_content"] == analysis.removeprefix("<|channel|>analysis<|message|>").strip()
    assert message["content"] == final


def test_a_streamed_reply_in_channels_is_split_alike(server: Server) -> None:
    message = chat(server, BODY)
    reasoning, content = streamed_chat(server, BODY)
    assert (reasoning.strip(), content) == (message["reasoning_content"], message["content"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_arrives_as_a_tool_call(server: Server, stream: bool) -> None:
    name, arguments, content = forced_call(server, WEATHER, "Weather in Paris?", stream)
    assert name == "get_weather" and json.loads(arguments)["city"] in ("Paris", "Oslo") and not content


MUSE_BODY = {"messages": [{"role": "user", "content": "Is it raining?"}], "max_tokens": 100, "temperature": 0,
             "grammar": 'root ::= " to=self<|message|>" "the user asks" "<|eom|><|start|>assistant to=user<|message|>" '
                        '"It rains."'}


@pytest.fixture(scope="module")
def muse(server_dir: Path) -> Iterator[Server]:
    with template_server(server_dir, "muse-glimmer") as running:
        yield running


def test_muse_glimmers_thought_to_self_is_the_reasoning(muse: Server) -> None:
    """Muse Glimmer's messages to self and to the user, read as gpt-oss's channels are; its tools go through its
    template, and a forced call (an ATEM block) arrives as a tool call."""
    message = chat(muse, MUSE_BODY)
    assert (message["reasoning_content"], message["content"]) == ("the user asks", "It rains.")
    reasoning, content = streamed_chat(muse, MUSE_BODY)
    assert (reasoning.strip(), content) == (message["reasoning_content"], message["content"])
    prompt = requests.post(muse.url("/apply-template"), json={"messages": MUSE_BODY["messages"], "tools": [WEATHER]},
                           timeout=30).json()["prompt"]
    assert "get_weather" in prompt and "You can call the following tools" not in prompt
    name, arguments, _ = forced_call(muse, WEATHER, "Weather in Paris?", False)
    assert name == "get_weather" and json.loads(arguments)["city"] in ("Paris", "Oslo")


def test_a_prefilled_answer_goes_on_in_the_final_channel(server: Server) -> None:
    """As llama-server: the prompt leaves the reply in the final channel, after an empty analysis, so what the
    model writes is the answer's, streamed or not."""
    messages = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "My favourite is"}]
    prompt = requests.post(server.url("/apply-template"), json={"messages": messages}, timeout=30).json()["prompt"]
    assert prompt.endswith("<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>"
                           "My favourite is")
    body = {"messages": messages, "grammar": 'root ::= " blue."', "max_tokens": 8, "temperature": 0}
    message = requests.post(server.url("/v1/chat/completions"), json=body, timeout=120).json()["choices"][0]["message"]
    assert message["content"] == " blue." and not message.get("reasoning_content")
    assert streamed_chat(server, body) == ("", " blue.")
