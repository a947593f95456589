"""``--no-jinja``: llama.cpp's built-in (non-Jinja) chat templates, the model's own or one named with
``--chat-template``, on every route that renders a chat, with the real model. (It once loaded the
model and then exited: the template probes' typed content reached llama.cpp as a list.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import requests

from tests.integration.conftest import Server, start

HI: list[dict[str, Any]] = [{"role": "user", "content": "Hi"}]
TYPED: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}]


@pytest.fixture(scope="module")
def legacy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(tmp_path_factory.mktemp("legacy"), ["--no-jinja", "-np", "2", "-c", "2048"],
                   {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "/predict"})
    yield server
    assert server.stop() == 0, server.log()


def prompt(server: Server, messages: list[dict[str, Any]]) -> str:
    reply = requests.post(server.url("/apply-template"), json={"messages": messages}, timeout=30)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["prompt"])


def test_the_models_own_template_through_llamas_formatter(legacy_server: Server) -> None:
    # SmolLM2's template is ChatML, which llama.cpp recognises; text parts are joined by newlines
    assert prompt(legacy_server, HI) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert prompt(legacy_server, TYPED) == "<|im_start|>user\nHi\nthere<|im_end|>\n<|im_start|>assistant\n"
    props = requests.get(legacy_server.url("/props"), timeout=30).json()
    assert props["chat_template"]  # the template llama.cpp reads from the model


def test_every_route_that_renders_a_chat(legacy_server: Server) -> None:
    client = openai.OpenAI(base_url=legacy_server.url("/v1"), api_key="none")
    chat = client.chat.completions.create(model="m", messages=TYPED, max_tokens=4)  # type: ignore[arg-type]
    assert chat.choices[0].message.content and chat.usage is not None
    assert chat.usage.prompt_tokens == len(requests.post(legacy_server.url("/tokenize"), json={
        "content": prompt(legacy_server, TYPED), "parse_special": True}, timeout=30).json()["tokens"])
    stream: Any = client.chat.completions.create(model="m", messages=HI, max_tokens=4, stream=True)  # type: ignore[arg-type]
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    counted = requests.post(legacy_server.url("/v1/chat/completions/input_tokens"), json={"messages": TYPED},
                            timeout=30).json()
    assert counted["input_tokens"] == chat.usage.prompt_tokens
    response = client.responses.create(model="m", input="Hi", max_output_tokens=4)
    assert response.output_text
    messages = anthropic.Anthropic(base_url=legacy_server.base, api_key="none").messages
    answer = messages.create(model="m", max_tokens=4, system="Be brief.", messages=[{"role": "user", "content": "Hi"}])
    assert answer.content and answer.usage.input_tokens > 0
    tokens = messages.count_tokens(model="m", system="Be brief.", messages=[{"role": "user", "content": "Hi"}])
    assert tokens.input_tokens == answer.usage.input_tokens + (answer.usage.cache_read_input_tokens or 0)
    predicted = requests.post(legacy_server.url("/predict"), json={"instances": [
        {"@requestFormat": "chatCompletions", "messages": HI, "max_tokens": 4}]}, timeout=120).json()
    assert predicted["predictions"][0]["choices"][0]["message"]["content"]


@pytest.mark.parametrize("jinja", ["--no-jinja", "--jinja"])
def test_a_built_in_template_by_name(tmp_path: Path, jinja: str) -> None:
    server = start(tmp_path, [jinja, "--chat-template", "llama3", "-np", "1", "-c", "1024"])
    try:
        assert prompt(server, [{"role": "system", "content": "S"}, *HI]) == (
            "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n")
        chat = requests.post(server.url("/v1/chat/completions"), json={"messages": HI, "max_tokens": 4}, timeout=120)
        assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] >= 1
    finally:
        assert server.stop() == 0, server.log()
