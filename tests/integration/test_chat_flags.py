"""llama-server's chat and output flags with the real model: --no-prefill-assistant,
--reasoning-preserve, --skip-chat-parsing and --special, each against a server without them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.conftest import Server, start

# ChatML (the model's own format), and the template argument --reasoning-preserve sets, written out
TEMPLATE = (
    "{% if preserve_reasoning is defined %}[preserve_reasoning={{ preserve_reasoning }}]{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if not enable_thinking %}[thinking off]{% endif %}{% endif %}"  # DeepSeek-R1's and QwQ's test, written out
)
PREFILL = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "The colour is"}]
FORCED_CALL: dict[str, Any] = {
    "messages": [{"role": "user", "content": "What is the weather in Paris?"}], "max_tokens": 60, "temperature": 0,
    "tool_choice": "required", "tools": [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                              "required": ["city"]}}}]}


@pytest.fixture(scope="module")
def flagged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("chat-flags")
    (root / "template.jinja").write_text(TEMPLATE)
    server = start(root, ["-np", "1", "-c", "2048", "--chat-template-file", str(root / "template.jinja"),
                          "--no-prefill-assistant", "--no-reasoning-preserve", "--skip-chat-parsing", "--special"])
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("chat-plain")
    (root / "template.jinja").write_text(TEMPLATE)
    server = start(root, ["-np", "1", "-c", "2048", "--chat-template-file", str(root / "template.jinja")])
    yield server
    assert server.stop() == 0, server.log()


def rendered(server: Server, messages: list[dict[str, str]]) -> str:
    reply = requests.post(server.url("/apply-template"), json={"messages": messages}, timeout=30)
    assert reply.status_code == 200, reply.text
    prompt: str = reply.json()["prompt"]
    return prompt


def test_a_trailing_assistant_message_is_a_prefill_unless_no_prefill_assistant(flagged: Server, plain: Server
                                                                             ) -> None:
    assert rendered(plain, PREFILL).endswith("<|im_start|>assistant\nThe colour is")
    assert rendered(flagged, PREFILL).endswith("The colour is<|im_end|>\n<|im_start|>assistant\n")


def test_reasoning_preserve_reaches_the_template(flagged: Server, plain: Server) -> None:
    assert rendered(flagged, PREFILL[:1]).startswith("[preserve_reasoning=False]")
    assert rendered(plain, PREFILL[:1]).startswith("[preserve_reasoning=True]")  # llama-server's default


def test_reasoning_auto_tells_the_template_to_think(plain: Server) -> None:
    """--reasoning auto (the default) gives enable_thinking = true to a template that thinks, as llama-server: a
    template that closes its think block unless told to think lets the model think."""
    assert "[thinking off]" not in rendered(plain, PREFILL[:1])
    off = requests.post(plain.url("/apply-template"), timeout=30, json={
        "messages": PREFILL[:1], "chat_template_kwargs": {"enable_thinking": False}}).json()["prompt"]
    assert "[thinking off]" in off


def test_skip_chat_parsing_leaves_a_tool_call_in_the_content(flagged: Server, plain: Server) -> None:
    parsed = requests.post(plain.url("/v1/chat/completions"), json=FORCED_CALL, timeout=120).json()
    call = parsed["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get_weather"
    raw = requests.post(flagged.url("/v1/chat/completions"), json=FORCED_CALL, timeout=120).json()
    message = raw["choices"][0]["message"]
    assert not message.get("tool_calls") and "get_weather" in message["content"]
    assert raw["choices"][0]["finish_reason"] != "tool_calls"


def test_special_writes_special_tokens_in_the_text(flagged: Server, plain: Server) -> None:
    """<|im_start|> (a control token, not an end of generation) forced by a logit bias: left out of the
    text by default, written with --special."""
    token = requests.post(plain.url("/tokenize"), json={"content": "<|im_start|>"}, timeout=30).json()["tokens"]
    assert len(token) == 1
    body = {"prompt": "Hello", "n_predict": 1, "logit_bias": [[token[0], 100.0]], "temperature": 0}
    for server, text in ((plain, ""), (flagged, "<|im_start|>")):
        reply = requests.post(server.url("/completion"), json=body, timeout=60).json()
        assert reply["tokens_predicted"] == 1 and reply["content"] == text


def test_log_prompts_dir_writes_each_generations_prompt(server_dir: Path, tmp_path: Path) -> None:
    """--log-prompts-dir, as llama-server: a chat's rendered prompt, a completion's prompt as given, one file
    each, named by the time in milliseconds."""
    folder = tmp_path / "prompts" / "new"  # created by the server
    server = start(server_dir, ["-np", "1", "-c", "1024", "--log-prompts-dir", str(folder)])
    try:
        chat = requests.post(server.url("/v1/chat/completions"), timeout=60, json={
            "messages": [{"role": "user", "content": "Hello prompts"}], "max_tokens": 2})
        time.sleep(0.01)  # a file a millisecond
        completion = requests.post(server.url("/completion"), timeout=60, json={"prompt": [1, 2, 3], "n_predict": 2})
        assert chat.status_code == completion.status_code == 200
    finally:
        assert server.stop() == 0, server.log()
    files = sorted(folder.iterdir())
    assert [path.suffix for path in files] == [".txt", ".txt"] and all(len(path.stem) == 12 for path in files)
    rendered, tokens = (path.read_text() for path in files)
    assert "<|im_start|>user\nHello prompts<|im_end|>" in rendered and rendered.endswith("<|im_start|>assistant\n")
    assert json.loads(tokens) == [1, 2, 3]
