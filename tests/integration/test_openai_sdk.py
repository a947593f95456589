"""The official openai SDK against the container, unchanged but for the base URL."""

from __future__ import annotations

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.integration.conftest import Server


@pytest.fixture
def client(vertex_server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=vertex_server.url("/v1"), api_key="unused", max_retries=0)


def test_chat(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="anything", messages=[{"role": "user", "content": "What is 2+2?"}], max_tokens=12, temperature=0,
    )
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    assert completion.model == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_chat_stream(client: openai.OpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Name three fruits."}]
    whole = client.chat.completions.create(model="m", messages=messages, max_tokens=20, temperature=0)
    stream = client.chat.completions.create(
        model="m", messages=messages, max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    assert "".join(pieces) == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]


def test_completions(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="m", prompt="The sky is", max_tokens=8, temperature=0)
    assert completion.object == "text_completion"
    text = completion.choices[0].text
    stream = client.completions.create(model="m", prompt="The sky is", max_tokens=8, temperature=0, stream=True)
    streamed = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    assert streamed == text


def test_errors_reach_the_sdk_as_api_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "word " * 1500}], max_tokens=4,
        )
    assert caught.value.status_code == 400
    assert "exceeds the available context size" in str(caught.value)


def test_models(client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [model.id for model in models.data] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]
