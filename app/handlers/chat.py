"""POST /v1/chat/completions, /chat/completions and /apply-template."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api import ApiReply, ApiRequest, SseEvent
from app.context import ServerContext
from app.engine import Completion, TokenChunk
from app.errors import InvalidRequestError
from app.handlers.generation import JobGroup, started_stream
from app.handlers.params import GenerationFields, generation_request, validate_body
from app.handlers.shapes import (
    finish_reason,
    merged_timings,
    openai_envelope,
    random_id,
    timings_body,
    usage_body,
)

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str


class ChatBody(GenerationFields):
    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None


def _text_of(message: ChatMessage, index: int) -> str | None:
    if message.content is None or isinstance(message.content, str):
        return message.content
    texts = []
    for part in message.content:
        if part.type != "text":
            raise InvalidRequestError(
                f"Field 'messages.{index}.content': content part type {part.type!r} is not supported "
                "(this model takes text only)"
            )
        texts.append(part.text or "")
    return "\n".join(texts)


def _template_messages(body: ChatBody) -> list[dict[str, Any]]:
    rendered = []
    for index, message in enumerate(body.messages):
        content = _text_of(message, index)
        if content is None and message.role != "assistant":
            raise InvalidRequestError(f"Field 'messages.{index}.content': required for role {message.role!r}")
        if content is None and message.role == "assistant" and not message.tool_calls:
            raise InvalidRequestError(f"Field 'messages.{index}': an assistant message needs content or tool_calls")
        item: dict[str, Any] = dict(message.model_extra or {})
        item.update(role=message.role, content=content or "")
        for key in ("name", "tool_calls", "tool_call_id"):
            value = getattr(message, key)
            if value is not None:
                item[key] = value
        rendered.append(item)
    return rendered


def _check_unsupported(body: ChatBody) -> None:
    if body.response_format is not None and body.response_format.type != "text":
        raise InvalidRequestError(
            f"Field 'response_format': type {body.response_format.type!r} is not supported by this server yet"
        )
    if body.logprobs:
        raise InvalidRequestError("Field 'logprobs': log-probabilities are not supported by this server yet")


def render_prompt(ctx: ServerContext, body: ChatBody) -> str:
    """The chat rendered through the template. A trailing assistant message is a prefill: the
    model continues it rather than starting a new turn."""
    messages = _template_messages(body)
    template = ctx.chat_template
    if messages[-1]["role"] == "assistant" and body.add_generation_prompt:
        if len(messages) > 1 and messages[-2]["role"] == "assistant":
            raise InvalidRequestError("Field 'messages': cannot have two assistant messages at the end")
        head = template.render(messages[:-1], True, body.tools, body.chat_template_kwargs)
        return head + str(messages[-1]["content"])
    return template.render(messages, body.add_generation_prompt, body.tools, body.chat_template_kwargs)


def post_apply_template(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(ChatBody, request.json_object())
    return ApiReply(body={"prompt": render_prompt(ctx, body)})


def post_chat_completions(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(ChatBody, request.json_object())
    _check_unsupported(body)
    prompt = ctx.engine.vocab.tokenize(render_prompt(ctx, body), True, True)
    job = generation_request(ctx, body, prompt)
    group = JobGroup(ctx.engine, [job])
    response_id = random_id("chatcmpl-")
    if body.stream:
        return ApiReply(stream=_chat_stream(ctx, group, request, response_id, body.include_usage()))
    results = group.results(request.should_stop)
    reply = openai_envelope(ctx, "chat.completion", response_id)
    reply["choices"] = [
        {
            "finish_reason": finish_reason(result),
            "index": index,
            "message": {"role": "assistant", "content": result.text},
            "logprobs": None,
        }
        for index, result in enumerate(results)
    ]
    reply["usage"] = usage_body(results)
    reply["timings"] = merged_timings(results)
    return ApiReply(body=reply)


def _chat_stream(
    ctx: ServerContext, group: JobGroup, request: ApiRequest, response_id: str, include_usage: bool
) -> Iterator[SseEvent]:
    def chunk(choices: list[dict[str, Any]]) -> dict[str, Any]:
        body = openai_envelope(ctx, "chat.completion.chunk", response_id)
        body["choices"] = choices
        return body

    results: list[Completion] = []
    started: set[int] = set()
    for item in started_stream(group, request.should_stop):
        index, event = item.index, item.event
        if index not in started:
            started.add(index)
            yield SseEvent(chunk([{"finish_reason": None, "index": index,
                                   "delta": {"role": "assistant", "content": None}}]))
        if isinstance(event, TokenChunk):
            if event.text:
                yield SseEvent(chunk([{"finish_reason": None, "index": index,
                                       "delta": {"content": event.text}}]))
            continue
        results.append(event)
        final = chunk([{"finish_reason": finish_reason(event), "index": index, "delta": {}}])
        if len(results) == len(group.jobs) and not include_usage:
            final["timings"] = timings_body(event.timings)
        yield SseEvent(final)
    if include_usage and results:
        usage = chunk([])
        usage["usage"] = usage_body(results)
        usage["timings"] = merged_timings(results)
        yield SseEvent(usage)
    yield SseEvent("[DONE]")
