"""A continued final message on the real model, as llama-server writes and reads it: with Seed-OSS's template
(a thinking template with tags of its own) a prefilled answer goes on after a closed thought, so what the model
writes is content; ``continue_final_message: "reasoning_content"`` goes on inside the thought, so what it writes
is reasoning until it closes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.chats import streamed_chat, template_server
from tests.integration.conftest import Server

USER = {"role": "user", "content": "Name a colour."}


@pytest.fixture(scope="module")
def seed(server_dir: Path) -> Iterator[Server]:
    with template_server(server_dir, "ByteDance-Seed-OSS") as running:
        yield running


def test_a_prefilled_answer_goes_on_after_a_closed_thought(seed: Server) -> None:
    messages = [USER, {"role": "assistant", "content": "My favourite colour is"}]
    prompt = requests.post(seed.url("/apply-template"), json={"messages": messages}, timeout=30).json()["prompt"]
    assert prompt.endswith("<seed:think></seed:think>\nMy favourite colour is")
    body = {"messages": messages, "grammar": 'root ::= " blue."', "max_tokens": 8, "temperature": 0}
    message = requests.post(seed.url("/v1/chat/completions"), json=body, timeout=120).json()["choices"][0]["message"]
    assert message["content"] == " blue." and not message.get("reasoning_content")
    assert streamed_chat(seed, body) == ("", " blue.")


def test_a_continued_thought_is_reasoning_until_it_closes(seed: Server) -> None:
    messages = [USER, {"role": "assistant", "content": "", "reasoning_content": "They want"}]
    body = {"messages": messages, "continue_final_message": "reasoning_content", "add_generation_prompt": False,
            "grammar": 'root ::= " one colour." "</seed:think>" "Blue."', "max_tokens": 20, "temperature": 0}
    prompt = requests.post(seed.url("/apply-template"), json=body, timeout=30).json()["prompt"]
    assert prompt.endswith("<seed:think>They want")
    message = requests.post(seed.url("/v1/chat/completions"), json=body, timeout=120).json()["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == ("one colour.", "Blue.")
    reasoning, content = streamed_chat(seed, body)
    assert (reasoning.strip(), content) == ("one colour.", "Blue.")
