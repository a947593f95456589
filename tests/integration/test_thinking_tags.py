"""A template's own thinking tags, on the real model (``thinking_tags`` in app/templating/template_caps.py):
with Seed-OSS's template, a thought the model writes in ``<seed:think>...</seed:think>`` arrives as
``reasoning_content`` and the answer after it as the content, streamed or not, as llama-server splits it
with the tags its analysis finds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import Server, start

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
# the grammar makes the model write a thought in the template's tags, then an answer
GRAMMAR = 'root ::= "<seed:think>" [a-z ]{1,12} "</seed:think>" [A-Za-z ]{1,12}'
BODY = {"messages": [{"role": "user", "content": "Is it raining?"}], "grammar": GRAMMAR, "max_tokens": 40,
        "temperature": 0}


@pytest.fixture(scope="module")
def server(server_dir: Path) -> Iterator[Server]:
    running = start(server_dir, ["--jinja", "--chat-template-file", str(TEMPLATES / "ByteDance-Seed-OSS.jinja"),
                                 "-np", "1", "-c", "2048"])
    try:
        yield running
    finally:
        assert running.stop() == 0, running.log()


def test_a_thought_in_the_templates_tags_is_the_reasoning(server: Server) -> None:
    raw = requests.post(server.url("/v1/chat/completions"), json={**BODY, "reasoning_format": "none"},
                        timeout=120).json()["choices"][0]["message"]
    thought, _, answer = raw["content"].removeprefix("<seed:think>").partition("</seed:think>")
    assert thought and answer  # what the model wrote, tags and all
    message = requests.post(server.url("/v1/chat/completions"), json=BODY, timeout=120).json()["choices"][0]["message"]
    assert (message["reasoning_content"], message["content"]) == (thought.strip(), answer)


def test_a_streamed_thought_in_the_templates_tags_is_the_reasoning(server: Server) -> None:
    message = requests.post(server.url("/v1/chat/completions"), json=BODY, timeout=120).json()["choices"][0]["message"]
    with requests.post(server.url("/v1/chat/completions"), json={**BODY, "stream": True}, stream=True,
                       timeout=120) as reply:
        deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in reply.iter_lines(decode_unicode=True)
                  if line.startswith("data: {")]
    reasoning = "".join(delta.get("reasoning_content") or "" for delta in deltas)
    content = "".join(delta.get("content") or "" for delta in deltas)
    assert (reasoning.strip(), content) == (message["reasoning_content"], message["content"])
    assert "seed:think" not in reasoning + content
