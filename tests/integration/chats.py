"""What several real-model chat tests do alike: serve the embedded model with one of the real chat templates
(tests/data/templates), read a streamed chat's reasoning and content, and force a tool call through the
OpenAI SDK, streamed or not."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import requests

from tests.integration.conftest import Server, start

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"


@contextlib.contextmanager
def template_server(server_dir: Path, template: str, *args: str) -> Iterator[Server]:
    """The embedded model served with ``--jinja --chat-template-file`` of a template in tests/data/templates."""
    running = start(server_dir, ["--jinja", "--chat-template-file", str(TEMPLATES / f"{template}.jinja"), "-np", "1",
                                 "-c", "4096", *args])
    try:
        yield running
    finally:
        assert running.stop() == 0, running.log()


def streamed_chat(server: Server, body: dict[str, Any]) -> tuple[str, str]:
    """A streamed chat's reasoning and content, each joined from its deltas."""
    with requests.post(server.url("/v1/chat/completions"), json={**body, "stream": True}, stream=True,
                       timeout=120) as reply:
        deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in reply.iter_lines(decode_unicode=True)
                  if line.startswith("data: {")]
    return ("".join(delta.get("reasoning_content") or "" for delta in deltas),
            "".join(delta.get("content") or "" for delta in deltas))


def forced_call(server: Server, tool: dict[str, Any], question: str, stream: bool,
                **extra: Any) -> tuple[str, str, str]:
    """A chat through the OpenAI SDK that must call ``tool`` (``tool_choice`` required): the one call's name and
    arguments, and the answer's content beside it."""
    client = openai.OpenAI(base_url=server.url("/v1"), api_key="none")
    asked: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": question}], "tools": [tool],
                             "tool_choice": "required", "max_tokens": 160, "temperature": 0, "extra_body": extra}
    if stream:
        chunks = list(client.chat.completions.create(**asked, stream=True))
        calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or []]
        finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1]
        assert finish == "tool_calls" and len(calls) == 1 and calls[0].function is not None, chunks
        content = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        return calls[0].function.name or "", calls[0].function.arguments or "", content
    choice = client.chat.completions.create(**asked).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    return call.function.name, call.function.arguments, choice.message.content or ""
