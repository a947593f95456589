"""A JSON body is read as JSON whatever its Content-Type, as llama-server reads it: curl's ``-d``
labels it a URL-encoded form, and the README's own "Try it" commands send it so. Only a route that
takes a form (the transcription upload: tests/integration/test_multimodal.py) reads one; a body that
is not JSON is a 400 saying so."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import Server

README = Path(__file__).resolve().parents[2] / "README.md"
FORM = "application/x-www-form-urlencoded"


def try_it_commands() -> list[str]:
    """The curl commands of the README's first "Try it" block, joined across their lines."""
    text = README.read_text()
    block = text[text.index("Try it:"):].split("```sh\n", 1)[1].split("```", 1)[0]
    return [command.strip() for command in re.split(r"\n(?=curl )", block) if command.strip()]


def test_the_readmes_try_it_commands_are_answered(vertex_server: Server) -> None:
    commands = try_it_commands()
    assert len(commands) == 2 and all(command.startswith("curl ") for command in commands), commands
    answers = []
    for command in commands:
        command = command.replace("curl ", "curl -sS --fail-with-body ", 1)
        command = command.replace("localhost:8080", vertex_server.base)
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        answers.append(json.loads(done.stdout))
    assert answers[0]["status"] == "ok"
    chat, tokens = answers[1]["predictions"]
    assert chat["choices"][0]["message"]["content"]
    assert tokens["tokens"] and all(isinstance(token, int) for token in tokens["tokens"])


@pytest.mark.parametrize("content_type", [FORM, "text/plain", "application/octet-stream", None])
def test_a_json_body_is_json_whatever_its_type(vertex_server: Server, content_type: str | None) -> None:
    expected = requests.post(vertex_server.url("/tokenize"), json={"content": "Hello world"}, timeout=30).json()
    assert len(expected["tokens"]) >= 2
    headers = {"Content-Type": content_type} if content_type else {}
    body = json.dumps({"content": "Hello world"}).encode()
    answer = requests.post(vertex_server.url("/tokenize"), data=body, headers=headers, timeout=30)
    assert answer.status_code == 200 and answer.json() == expected
    chat = requests.post(vertex_server.url("/v1/chat/completions"), headers=headers, timeout=120, data=json.dumps(
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}).encode())
    assert chat.status_code == 200 and chat.json()["usage"]["completion_tokens"] >= 1


def test_a_form_body_that_is_not_json_is_a_400_saying_so(vertex_server: Server) -> None:
    answer = requests.post(vertex_server.url("/tokenize"), data={"content": "Hello"}, timeout=30)  # a real form
    assert answer.status_code == 400
    assert "not valid JSON" in answer.json()["error"]["message"]



def test_the_readmes_openai_sdk_example_runs(vertex_server: Server) -> None:
    """The README's Python example, run as written but for the server's address."""
    text = README.read_text()
    example = text[text.index("## From the OpenAI SDK"):].split("```python\n", 1)[1].split("```", 1)[0]
    example = example.replace("http://localhost:8080", vertex_server.base)
    assert vertex_server.base in example
    done = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip(), (done.stdout, done.stderr)
