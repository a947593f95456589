"""A template's own thinking tags, on the real model: with Seed-OSS's template (tags found in its rendering:
``thinking_tags`` in app/templating/template_caps.py) a thought the model writes in
``<seed:think>...</seed:think>``, with Gemma 4's (tags declared as llama-server declares them:
app/templating/dedicated.py) one in ``<|channel>thought ...<channel|>``, arrives as ``reasoning_content`` and
the answer after it as the content, streamed or not, as llama-server splits them."""

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
    grammar = f'root ::= {json.dumps(opening)} [a-z ]{{1,12}} {json.dumps(closing)} [A-Za-z ]{{1,12}}'
    body = {"messages": [{"role": "user", "content": "Is it raining?"}], "grammar": grammar, "max_tokens": 40,
            "temperature": 0}
    with template_server(server_dir, request.param) as running:
        yield body, running


def test_a_thought_in_the_templates_tags_is_the_reasoning(templated: tuple[dict[str, object], Server]) -> None:
    body, server = templated
    raw = requests.post(server.url("/v1/chat/completions"), json={**body, "reasoning_format": "none"},
                        timeout=120).json()["choices"][0]["message"]
    opening, closing = next(tags for tags in TAGS.values() if raw["content"].startswith(tags[0]))
    thought, _, answer = raw["content"].removeprefix(opening).partition(closing)
    assert thought and answer  # what the model wrote, tags and all
    message = requests.post(server.url("/v1/chat/completions"), json=body, timeout=120).json()["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (thought.strip(), answer)


def test_a_streamed_thought_in_the_templates_tags_is_the_reasoning(
        templated: tuple[dict[str, object], Server]) -> None:
    body, server = templated
    message = requests.post(server.url("/v1/chat/completions"), json=body, timeout=120).json()["choices"][0]["message"]
    reasoning, content = streamed_chat(server, body)
    assert (reasoning.strip(), content) == (message["reasoning_content"], message["content"])
    assert "think>" not in reasoning + content and "channel" not in reasoning + content
