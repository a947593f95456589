"""Special tokens in the generated text, on the real model (app/handlers/preserved_tokens.py): a chat
template whose tool calls are written with special tokens (SmolLM2's ``<issue_start>``, ``<issue_comment>``,
``<jupyter_text>``, ... are control tokens, left out of the text without ``--special``) gets its calls
read, because the tokens of its call markup are kept in the text; a request's own ``preserved_tokens`` keep
theirs, as in llama-server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import requests

from tests.integration.conftest import Server, start

# calls as <issue_start>name\n<issue_comment>key<jupyter_text>value<jupyter_code>...\n<issue_closed>
TEMPLATE = """{%- if tools %}<|im_start|>system
Tools: {{ tools | tojson }}<|im_end|>
{% endif %}{%- for m in messages %}<|im_start|>{{ m.role }}
{% if m.tool_calls %}{% for c in m.tool_calls %}<issue_start>{{ c.function.name }}
{% for k, v in c.function.arguments.items() %}<issue_comment>{{ k }}<jupyter_text>{{ v }}<jupyter_code>
{% endfor %}<issue_closed>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
MARKUP = ("<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_text>", "<jupyter_code>")
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}}, "required": ["city"]}}}
IM_START = "<|im_start|>"


@pytest.fixture(scope="module")
def server(server_dir: Path) -> Iterator[Server]:
    template = server_dir / "special-markup.jinja"
    template.write_text(TEMPLATE)
    running = start(server_dir, ["--jinja", "--chat-template-file", str(template), "-np", "1", "-c", "2048"])
    try:
        yield running
    finally:
        assert running.stop() == 0, running.log()


def token_id(server: Server, text: str) -> int:
    tokens = requests.post(server.url("/tokenize"), json={"content": text}, timeout=30).json()["tokens"]
    assert len(tokens) == 1, tokens
    return int(tokens[0])


def test_a_call_written_with_special_tokens_is_read(server: Server) -> None:
    """The grammar spells the markup; the biases make the model write each tag as its special token (which
    llama.cpp leaves out of the text), so the call is read only if those tokens are kept."""
    biases = {str(token_id(server, tag)): 30 for tag in MARKUP}
    client = openai.OpenAI(base_url=server.url("/v1"), api_key="none")
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER],  # type: ignore[call-overload]
        tool_choice="required", max_tokens=60, temperature=0, logit_bias=biases, logprobs=True)
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    generated = {getattr(item, "id", None) for item in choice.logprobs.content}  # llama-server's token ids
    assert {int(token) for token in biases} <= generated  # every tag was written as its special token
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] in ("Paris", "Oslo")


def test_a_requests_preserved_tokens_are_kept_in_its_text(server: Server) -> None:
    im_start = token_id(server, IM_START)
    body = {"prompt": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "n_predict": 1,
            "logit_bias": [[im_start, 100]]}  # the one token generated is <|im_start|>
    plain = requests.post(server.url("/completion"), json=body, timeout=60).json()
    assert plain["content"] == "" and plain["tokens_predicted"] == 1  # a special token's text is left out
    kept = requests.post(server.url("/completion"), json={**body, "preserved_tokens": [IM_START, "two words"]},
                         timeout=60).json()
    assert kept["content"] == IM_START
    assert kept["generation_settings"]["preserved_tokens"] == [im_start]  # "two words" is not one token
