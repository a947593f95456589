"""Behaviour that needs a template or model the embedded one lacks: a Hermes tool template
(given with --chat-template-file) and FIM tokens (a copy of the model with FIM metadata)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import openai
import pytest
import requests
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageFunctionToolCall

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import ROOT, Server, start

HERMES = ROOT / "tests" / "data" / "hermes_tools.jinja"
# A bounded string, so that a call the grammar forces always ends within the tests' token limits
# (the 135M model, sampling, would otherwise write on inside a string on some runs).
LOOKUP_PARAMETERS: dict[str, object] = {"type": "object", "properties": {"word": {"type": "string", "maxLength": 12}},
                                        "required": ["word"]}
TOOL: ChatCompletionFunctionToolParam = {"type": "function", "function": {
    "name": "lookup", "description": "Look a word up in the dictionary", "parameters": LOOKUP_PARAMETERS}}


@pytest.fixture(scope="module")
def hermes_server(server_dir: Path) -> Iterator[Server]:
    # --slots-debug: the tool-call grammar is read back from /slots (_hermes_grammar)
    server = start(server_dir, ["-np", "2", "-c", "4096", "--chat-template-file", str(HERMES), "--slots-debug"])
    yield server
    assert server.stop() == 0, server.log()


def test_the_template_renders_the_tools(hermes_server: Server) -> None:
    prompt = requests.post(hermes_server.url("/apply-template"), timeout=10, json={
        "messages": [{"role": "user", "content": "Define cat"}], "tools": [TOOL]}).json()["prompt"]
    assert "<tools>" in prompt and '"name": "lookup"' in prompt
    assert "<tool_call>" in prompt
    assert "You can call the following tools" not in prompt  # the generic instructions are not needed


def test_a_named_call_comes_back_in_hermes_form(hermes_server: Server) -> None:
    client = openai.OpenAI(base_url=hermes_server.url("/v1"), api_key="x", max_retries=0)
    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Define the word cat"}], tools=[TOOL],
        tool_choice={"type": "function", "function": {"name": "lookup"}}, max_tokens=200,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall) and call.function.name == "lookup"
    jsonschema.validate(json.loads(call.function.arguments), LOOKUP_PARAMETERS)
    raw = requests.post(hermes_server.url("/completion"), timeout=60, json={
        "prompt": "<|im_start|>user\nDefine cat<|im_end|>\n<|im_start|>assistant\n", "n_predict": 200,
        "grammar": _hermes_grammar(hermes_server)}).json()["content"]
    assert raw.startswith("<tool_call>") and raw.rstrip().endswith("</tool_call>")


def _hermes_grammar(server: Server) -> str:
    # The same grammar the server builds for a named call, read back from a chat request's settings.
    reply = requests.post(server.url("/v1/chat/completions"), timeout=60, json={
        "messages": [{"role": "user", "content": "x"}], "tools": [TOOL], "max_tokens": 1,
        "tool_choice": {"type": "function", "function": {"name": "lookup"}}})
    assert reply.status_code == 200
    slots = requests.get(server.url("/slots"), timeout=10).json()
    grammars = [slot["params"]["grammar"] for slot in slots if "params" in slot and slot["params"]["grammar"]]
    assert grammars and "<tool_call>" in grammars[0]
    return str(grammars[0])


def test_an_auto_reply_is_either_a_valid_call_or_plain_text(hermes_server: Server) -> None:
    client = openai.OpenAI(base_url=hermes_server.url("/v1"), api_key="x", max_retries=0)
    for seed in (1, 2, 3):
        message = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Look up the word 'ephemeral'."}],
            tools=[TOOL], tool_choice="auto", max_tokens=60, seed=seed,
        ).choices[0].message
        if message.tool_calls:
            call = message.tool_calls[0]
            assert isinstance(call, ChatCompletionMessageFunctionToolCall) and call.function.name == "lookup"
            json.loads(call.function.arguments)
        else:
            assert message.content is not None and "<tool_call>" not in message.content


@pytest.fixture(scope="module")
def fim_server(server_dir: Path) -> Iterator[Server]:
    """The embedded model with three of its special tokens declared as FIM prefix/suffix/middle."""
    model = server_dir / "smollm2-fim.gguf"
    subprocess.run(
        [sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(embedded_model_path()), str(model),
         "--special-token-by-id", "fim_pre", "6", "--special-token-by-id", "fim_suf", "7",
         "--special-token-by-id", "fim_mid", "8", "--force"],
        check=True, capture_output=True,
    )
    server = start(server_dir, ["--model", str(model), "-np", "2", "-c", "2048", "-b", "512"])  # room for context
    yield server
    assert server.stop() == 0, server.log()


def test_infill_needs_fim_tokens(vertex_server: Server) -> None:
    response = requests.post(vertex_server.url("/infill"), json={"input_prefix": "a", "input_suffix": "b"},
                             timeout=10)
    assert response.status_code == 501
    error = response.json()["error"]
    assert error["type"] == "not_supported_error"
    assert error["message"].startswith("Infill is not supported by this model: prefix token is missing.")


def test_infill_lays_out_the_fim_prompt(fim_server: Server) -> None:
    body = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(1, 2))\n",
            "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
            "prompt": "a", "n_predict": 8, "temperature": 0}
    reply = requests.post(fim_server.url("/infill"), json=body, timeout=60).json()
    assert reply["stop"] is True and "content" in reply
    prompt = reply["prompt"]
    snippet = prompt.index("def sub(a, b)")
    pre, suf, mid = prompt.index("<filename>"), prompt.index("<gh_stars>"), prompt.index("<issue_start>")
    assert snippet < pre < suf < mid
    assert "--- snippet ---" in prompt
    assert prompt.endswith("<issue_start>")  # llama-server's layout: the prompt follows the prefix
    assert prompt[pre + len("<filename>"):suf] == str(body["input_prefix"]) + "a"
    assert prompt[suf + len("<gh_stars>"):mid] == body["input_suffix"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"input_suffix": "x"}, 400, "input_prefix"),
        ({"input_prefix": "x", "input_suffix": "y", "input_extra": [{"filename": "f"}]}, 400, "text"),
        ({"input_prefix": "x", "input_suffix": "y", "input_extra": "nope"}, 400, "input_extra"),
    ],
)
def test_bad_infill_requests(fim_server: Server, body: dict[str, object], status: int, words: str) -> None:
    response = requests.post(fim_server.url("/infill"), json=body, timeout=10)
    assert response.status_code == status
    assert words in response.json()["error"]["message"]
