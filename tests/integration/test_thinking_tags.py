"""A template's own thinking tags, on the real model: with Seed-OSS's template (tags found in its rendering:
``thinking_tags`` in app/templating/template_caps.py) a thought the model writes in
``<seed:think>...</seed:think>``, with Gemma 4's (tags declared as llama-server declares them:
app/templating/dedicated.py) one in ``<|channel>thought ...<channel|>``, arrives as ``reasoning_content`` and
the answer after it as the content, streamed or not, as llama-server splits them; Kimi K3's answer also
without the response tags around it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.chats import streamed_chat, template_server
from tests.integration.conftest import Server

TAGS = {"ByteDance-Seed-OSS": ("<seed:think>", "</seed:think>"),
        "google-gemma-4-31B-it": ("<|channel>thought\n", "<channel|>")}


@pytest.fixture(scope="module", params=sorted(TAGS))
def templated(request: pytest.FixtureRequest, server_dir: Path) -> Iterator[tuple[dict[str, object], Server]]:
    opening, closing = TAGS[request.param]
    # the grammar makes the model write a thought in the template's tags, then an answer
    grammar = f'root ::= {json.dumps(opening)} "rain is likely" {json.dumps(closing)} "Take an umbrella."'
    body = {"messages": [{"role": "user", "content": "Is it raining?"}], "grammar": grammar, "max_tokens": 80,
            "temperature": 0}
    with template_server(server_dir, request.param) as running:
        yield body, running


def test_a_thought_in_the_templates_tags_is_the_reasoning(templated: tuple[dict[str, object], Server]) -> None:
    body, server = templated
    raw = requests.post(server.url("/v1/chat/completions"), json={**body, "reasoning_format": "none"},
                        timeout=120).json()["choices"][0]["message"]
    opening, closing = next(tags for tags in TAGS.values() if raw["content"].startswith(tags[0]))
    thought, _, answer = raw["content"].removeprefix(opening).partition(closing)
    assert (thought.strip(), answer) == ("rain is likely", "Take an umbrella.")  # what the model wrote, tags and all
    message = requests.post(server.url("/v1/chat/completions"), json=body, timeout=120).json()["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (thought.strip(), answer)


def test_a_streamed_thought_in_the_templates_tags_is_the_reasoning(
        templated: tuple[dict[str, object], Server]) -> None:
    body, server = templated
    message = requests.post(server.url("/v1/chat/completions"), json=body, timeout=120).json()["choices"][0]["message"]
    reasoning, content = streamed_chat(server, body)
    assert (reasoning.strip(), content) == (message["reasoning_content"], message["content"])
    assert "think>" not in reasoning + content and "channel" not in reasoning + content


@pytest.fixture(scope="module")
def kimi_k3(server_dir: Path) -> Iterator[Server]:
    with template_server(server_dir, "Kimi-K3") as running:
        yield running


def test_kimi_k3s_thought_and_answer_without_their_tags(kimi_k3: Server) -> None:
    """Kimi K3's prompt opens a think tag; the model closes it, then writes its answer in response and message
    tags (llama-server's Kimi K3 parser reads past them): the thought is the reasoning, the answer the content."""
    body = {"messages": [{"role": "user", "content": "Is it raining?"}], "max_tokens": 80, "temperature": 0,
            "grammar": 'root ::= [a-z ]{1,12} "<|close|>think<|sep|><|open|>response<|sep|>Take an umbrella.'
                       '<|close|>response<|sep|><|close|>message<|sep|>"'}
    message = requests.post(kimi_k3.url("/v1/chat/completions"), json=body, timeout=120).json()["choices"][0]["message"]
    assert message["content"] == "Take an umbrella." and message["reasoning_content"]
    assert "<|" not in message["reasoning_content"]
    reasoning, content = streamed_chat(kimi_k3, body)
    assert content == "Take an umbrella." and reasoning.strip() and "<|" not in reasoning
