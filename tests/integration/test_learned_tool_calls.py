"""Tool calls in the chat template's own format, on the real model, for templates whose format this server
learns (app/templating/call_learning.py) or declares (app/templating/declared_formats.py: LFM2's Python-style
calls, Granite 3.3's JSON list, MiniMax M3's keyed tags): the template renders the tools itself, a forced call
is written in the template's format (tagged arguments, a JSON call section, a JSON list of call objects,
keyword arguments) and arrives through the OpenAI SDK as a tool call, streamed or not, and a call history
renders in that format (where the template writes calls in a history at all)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.chats import forced_call, template_server
from tests.integration.conftest import Server

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "enum": ["Paris", "Oslo"]},
                                                "days": {"type": "integer"}},
                                                "required": ["city", "days"]}}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
# Nemotron's template opens a thinking block: the forced call's grammar lets the model end it first, and a
# reasoning budget of 0 ends it at once (the forced end tag goes through the same grammar)
NO_THINKING = {"reasoning_budget_tokens": 0}
# template: (what its own rendering of the tools holds, how it writes a call in a history; None: it writes none)
CASES: dict[str, tuple[str, str | None]] = {
    "Qwen3-Coder": ("<tools>", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>"),
    "Kimi-K2-Thinking": ("<|im_system|>tool_declare",
                         '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}'),
    "google-gemma-4-31B-it": ("<|tool>declaration:get_weather", 'call:get_weather{city:<|"|>Paris<|"|>}'),
    "NVIDIA-Nemotron-Nano-v2": ("<AVAILABLE_TOOLS>", '<TOOLCALL>[{"name": "get_weather", "arguments": '
                                                     '{"city": "Paris"}}]</TOOLCALL>'),
    "LFM2.5-Instruct": ('List of tools: [{"type": "function", "function": {"name": "get_weather"', None),
    "ibm-granite-granite-3.3-2B-Instruct": ("<|start_of_role|>available_tools<|end_of_role|>", None),
    "MiniMax-M3": ('<tools>\n<tool>{"name": "get_weather"',
                   ']<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>'),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def templated(request: pytest.FixtureRequest, server_dir: Path) -> Iterator[tuple[str, Server]]:
    with template_server(server_dir, request.param, "-np", "2") as server:
        yield request.param, server


def test_the_template_renders_the_tools_itself(templated: tuple[str, Server]) -> None:
    name, server = templated
    prompt = requests.post(server.url("/apply-template"), timeout=30,
                           json={"messages": QUESTION, "tools": [WEATHER]}).json()["prompt"]
    assert CASES[name][0] in prompt and "get_weather" in prompt
    assert "You can call the following tools" not in prompt  # not this server's generic description


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_format_arrives_as_a_tool_call(templated: tuple[str, Server],
                                                                      stream: bool) -> None:
    _, server = templated
    name, text, _ = forced_call(server, WEATHER, QUESTION[0]["content"], stream, **NO_THINKING)
    arguments = json.loads(text)
    assert name == "get_weather" and set(arguments) == {"city", "days"} and arguments["city"] in ("Paris", "Oslo")
    assert isinstance(arguments["days"], int)  # typed by the schema, whether the template quotes it or not


def test_a_call_history_renders_in_the_templates_format(templated: tuple[str, Server]) -> None:
    name, server = templated
    messages = [*QUESTION, {"role": "assistant", "content": "", "tool_calls": [{
        "id": "Ab3De4Fg5", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "Ab3De4Fg5", "content": "sunny"}]
    prompt = requests.post(server.url("/apply-template"), timeout=30,
                           json={"messages": messages, "tools": [WEATHER]}).json()["prompt"]
    written = CASES[name][1]
    assert "sunny" in prompt and (written is None or written in prompt)
    reply = requests.post(server.url("/v1/chat/completions"), timeout=120,
                          json={"messages": messages, "tools": [WEATHER], "max_tokens": 8, "temperature": 0})
    assert reply.status_code == 200, reply.text[:300]
