"""Reasoning budgets on the real model, with a template that opens the thinking: a budget forces
the end of the thinking (the answer follows it), and the control route ends a running thinking."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import Server, start

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "<|im_start|>assistant\n<think>\n")
CHAT = {"messages": [{"role": "user", "content": "Tell me about the sea."}], "ignore_eos": True, "temperature": 0}


@pytest.fixture(scope="module")
def thinking(server_dir: Path) -> Iterator[Server]:
    server = start(server_dir, ["-np", "1", "-c", "1024", "--chat-template", TEMPLATE])
    yield server
    assert server.stop() == 0, server.log()


def test_a_budget_ends_the_thinking_and_the_answer_follows(thinking: Server) -> None:
    reply = requests.post(thinking.url("/v1/chat/completions"), timeout=120, json={
        **CHAT, "max_tokens": 40, "reasoning_budget_tokens": 6, "reasoning_budget_message": " Done."}).json()
    message = reply["choices"][0]["message"]
    assert message["reasoning_content"].endswith("Done.")
    thought = requests.post(thinking.url("/tokenize"), json={"content": message["reasoning_content"]},
                            timeout=10).json()["tokens"]
    assert len(thought) <= 6 + 3  # six of its own, then the message
    assert message["content"]  # the answer follows the forced end (what the model then writes is its own)


def test_control_ends_a_running_thinking(thinking: Server) -> None:
    with requests.post(thinking.url("/v1/chat/completions"), stream=True, timeout=120, json={
            **CHAT, "max_tokens": 200, "stream": True, "reasoning_control": True}) as stream:
        reasoning, content, answered = [], [], None
        for line in stream.iter_lines(decode_unicode=True):
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if not chunk["choices"]:
                continue
            delta = chunk["choices"][0]["delta"]
            reasoning.append(delta.get("reasoning_content") or "")
            content.append(delta.get("content") or "")
            if answered is None and len([r for r in reasoning if r]) >= 3:  # thinking: end it
                answered = requests.post(thinking.url("/v1/chat/completions/control"), timeout=30,
                                         json={"id": chunk["id"], "action": "reasoning_end"}).json()
    assert answered == {"success": True}
    assert "".join(content)  # after the forced end of the thinking, an answer
