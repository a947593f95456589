"""gpt-oss's harmony replies on the real model, with gpt-oss's own template (app/handlers/harmony.py): a reply
in channels (written under a grammar, as gpt-oss writes it) arrives with the analysis as ``reasoning_content``
and the final channel as the content, streamed or not; a forced call arrives as a tool call through the
OpenAI SDK, as llama-server's gpt-oss parser reads them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import requests

from tests.integration.conftest import Server, start

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
GRAMMAR = ('root ::= "<|channel|>analysis<|message|>" [a-z ]{1,12} "<|end|><|start|>assistant<|channel|>final'
           '<|message|>" [A-Za-z ]{1,12}')
BODY = {"messages": [{"role": "user", "content": "Is it raining?"}], "grammar": GRAMMAR, "max_tokens": 60,
        "temperature": 0}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def server(server_dir: Path) -> Iterator[Server]:
    running = start(server_dir, ["--jinja", "--chat-template-file", str(TEMPLATES / "openai-gpt-oss-120b.jinja"),
                                 "-np", "1", "-c", "4096"])
    try:
        yield running
    finally:
        assert running.stop() == 0, running.log()


def chat(server: Server, body: dict[str, object]) -> dict[str, object]:
    reply = requests.post(server.url("/v1/chat/completions"), json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    message = reply.json()["choices"][0]["message"]
    assert isinstance(message, dict)
    return message


def test_the_analysis_is_the_reasoning_and_the_final_channel_the_answer(server: Server) -> None:
    raw = str(chat(server, {**BODY, "reasoning_format": "none"})["content"])
    analysis, _, final = raw.partition("<|end|>")  # none: the analysis stays, with its markers, as llama-server
    assert analysis.startswith("<|channel|>analysis<|message|>") and final and "<|" not in final
    message = chat(server, BODY)
    assert message["reasoning_content"] == analysis.removeprefix("<|channel|>analysis<|message|>").strip()
    assert message["content"] == final


def test_a_streamed_reply_in_channels_is_split_alike(server: Server) -> None:
    message = chat(server, BODY)
    with requests.post(server.url("/v1/chat/completions"), json={**BODY, "stream": True}, stream=True,
                       timeout=120) as reply:
        deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in reply.iter_lines(decode_unicode=True)
                  if line.startswith("data: {")]
    reasoning = "".join(delta.get("reasoning_content") or "" for delta in deltas)
    content = "".join(delta.get("content") or "" for delta in deltas)
    assert (reasoning.strip(), content) == (message["reasoning_content"], message["content"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_arrives_as_a_tool_call(server: Server, stream: bool) -> None:
    client = openai.OpenAI(base_url=server.url("/v1"), api_key="none")
    question = [{"role": "user", "content": "Weather in Paris?"}]
    if stream:
        chunks = list(client.chat.completions.create(model="m", messages=question, tools=[WEATHER],  # type: ignore[call-overload]
                                                     tool_choice="required", max_tokens=60, temperature=0,
                                                     stream=True))
        calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
        content = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        assert len(calls) == 1 and calls[0].function is not None and not content
        name, arguments = calls[0].function.name, calls[0].function.arguments or ""
    else:
        reply = client.chat.completions.create(model="m", messages=question, tools=[WEATHER],  # type: ignore[call-overload]
                                               tool_choice="required", max_tokens=60, temperature=0)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls and not choice.message.content
        name, arguments = choice.message.tool_calls[0].function.name, choice.message.tool_calls[0].function.arguments
    assert name == "get_weather" and json.loads(arguments)["city"] in ("Paris", "Oslo")
