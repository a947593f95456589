"""POST /v1/messages (Anthropic Messages, answered through the chat pipeline) and
/v1/messages/count_tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.handlers.chat_pipeline import (
    ChatChoice,
    ChatDelta,
    PreparedChat,
    chat_deltas,
    chat_prompt_tokens,
    prepare_chat,
    run_chat,
    submit_chat,
)
from app.handlers.context import ServerContext
from app.handlers.generation import ping_interval, stream_reply
from app.handlers.media import SOURCE_FIELD
from app.handlers.params import ChatBody, validate_body
from app.handlers.shapes import random_id
from app.protocol.api import ApiReply, ApiRequest, Idle, SseEvent
from app.protocol.errors import InvalidRequestError

DEFAULT_MAX_TOKENS = 4096


class TextBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class ToolUseBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] | Any = ""


class ImageBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["image"]
    source: dict[str, Any]


class ThinkingBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["thinking", "redacted_thinking"]


ContentBlock = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock,
    Field(discriminator="type"),
]


class AnthropicMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class MessagesBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[AnthropicMessage]  # empty is answered, as llama-server answers it
    system: str | list[TextBlock] | None = None
    max_tokens: int = Field(DEFAULT_MAX_TOKENS, ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None  # {"type": "enabled", "budget_tokens": N}: a reasoning budget


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(block, TextBlock) for block in content):
        return "\n".join(block.text for block in content)
    return json.dumps(content)


def _image_part(block: ImageBlock, field: str) -> dict[str, Any]:
    """An image block as a chat ``image_url`` part (base64 sources become data: URIs)."""
    source = block.source
    if source.get("type") == "base64":
        data, media_type = source.get("data"), source.get("media_type") or "application/octet-stream"
        if not isinstance(data, str):
            raise InvalidRequestError(f"Field '{field}.source.data': required (base64 image data)")
        url = f"data:{media_type};base64,{data}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise InvalidRequestError(f"Field '{field}.source': must be a base64 source (type, media_type, data) or a "
                                  "url source (type, url)")
    return {"type": "image_url", "image_url": {"url": url}, SOURCE_FIELD: f"{field}.source"}


def _convert_message(message: AnthropicMessage, number: int) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for index, block in enumerate(message.content):
        if isinstance(block, TextBlock):
            texts.append(block.text)
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block, f"messages.{number}.content.{index}"))
        elif isinstance(block, ToolUseBlock):
            if message.role != "assistant":
                raise InvalidRequestError(f"Field 'messages.{number}.content.{index}': tool_use is an assistant block")
            calls.append({"id": block.id, "type": "function", "function": {
                "name": block.name, "arguments": json.dumps(block.input)}})
        elif isinstance(block, ToolResultBlock):
            if message.role != "user":
                raise InvalidRequestError(f"Field 'messages.{number}.content.{index}': tool_result is a user block")
            results.append({"role": "tool", "tool_call_id": block.tool_use_id,
                            "content": _tool_result_text(block.content)})
    converted: list[dict[str, Any]] = list(results)
    if len(parts) > len(texts):  # images: chat parts, in order
        content: Any = parts
    else:
        content = "\n".join(texts) if texts else None
    if content or calls:
        item: dict[str, Any] = {"role": message.role, "content": content}
        if calls:
            item["tool_calls"] = calls
        converted.append(item)
    return converted


def _tool_choice(choice: dict[str, Any] | None) -> Any:
    if choice is None:
        return None
    kind = choice.get("type")
    if kind == "auto":
        return "auto"
    if kind == "any":
        return "required"
    if kind == "none":
        return "none"
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise InvalidRequestError(f"Field 'tool_choice.type': must be auto, any, tool or none, got {kind!r}")


def to_chat(body: MessagesBody) -> ChatBody:
    messages: list[dict[str, Any]] = []
    if body.system:
        system = body.system if isinstance(body.system, str) else "\n".join(block.text for block in body.system)
        messages.append({"role": "system", "content": system})
    for number, message in enumerate(body.messages):
        messages.extend(_convert_message(message, number))
    tools = None
    if body.tools:
        tools = [{"type": "function", "function": {"name": t.get("name"), "description": t.get("description"),
                                                   "parameters": t.get("input_schema", {"type": "object"})}}
                 for t in body.tools]
    chat = {
        "messages": messages, "max_tokens": body.max_tokens, "stop": body.stop_sequences,
        "temperature": body.temperature, "top_p": body.top_p, "top_k": body.top_k, "tools": tools,
        "tool_choice": _tool_choice(body.tool_choice), "chat_template_kwargs": body.chat_template_kwargs,
        "stream": body.stream,
    }
    if body.thinking is not None and body.thinking.get("type") == "enabled":  # llama-server's default: 10000
        chat["thinking_budget_tokens"] = body.thinking.get("budget_tokens", 10000)
    return validate_body(ChatBody, chat)


def _stop_reason(choice: ChatChoice) -> str:
    if choice.tool_calls:
        return "tool_use"
    if choice.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if choice.stop_word else "end_turn"


def _usage(choice: ChatChoice, prepared: PreparedChat) -> dict[str, Any]:
    cached = choice.completion.timings.cache_n
    return {"cache_read_input_tokens": cached, "input_tokens": prepared.n_prompt - cached,
            "output_tokens": choice.completion.timings.predicted_n}


def _tool_use(call: Any) -> dict[str, Any]:
    try:
        arguments = json.loads(call.arguments)
    except json.JSONDecodeError:
        arguments = {"arguments": call.arguments}
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": arguments}


def post_messages(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(MessagesBody, request.json_object())
    prepared = prepare_chat(ctx, to_chat(body))
    message_id = random_id("msg_")
    if body.stream:
        return stream_reply(submit_chat(ctx, prepared), request.should_stop,
                            lambda stream: _stream(ctx, prepared, chat_deltas(ctx, prepared, stream), message_id),
                            stream_error=_stream_error,
                            ping_seconds=ping_interval(ctx.settings.sse_ping_interval, None))
    choice = run_chat(ctx, prepared, request.should_stop)[0]
    content: list[dict[str, Any]] = []
    if choice.reasoning:
        content.append({"type": "thinking", "thinking": choice.reasoning, "signature": ""})
    if choice.content or not choice.tool_calls:
        content.append({"type": "text", "text": choice.content})
    content.extend(_tool_use(call) for call in choice.tool_calls)
    return ApiReply(body={
        "id": message_id, "type": "message", "role": "assistant", "model": ctx.model_name, "content": content,
        "stop_reason": _stop_reason(choice), "stop_sequence": choice.stop_word, "usage": _usage(choice, prepared),
    })


def post_count_tokens(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(MessagesBody, request.json_object())
    tokens = chat_prompt_tokens(ctx, to_chat(body)).tokens
    return ApiReply(body={"input_tokens": len(tokens)})


def _stream_error(error: dict[str, Any]) -> SseEvent:
    return SseEvent(error, event="error")


def _stream(ctx: ServerContext, prepared: PreparedChat, deltas: Iterator[ChatDelta | Idle],
            message_id: str) -> Iterator[SseEvent | Idle]:
    def event(kind: str, **data: Any) -> SseEvent:
        return SseEvent({"type": kind, **data}, event=kind)

    start_usage = {"cache_read_input_tokens": 0, "input_tokens": prepared.n_prompt, "output_tokens": 0}
    yield event("message_start", message={
        "id": message_id, "type": "message", "role": "assistant", "content": [], "model": ctx.model_name,
        "stop_reason": None, "stop_sequence": None, "usage": start_usage})
    block = -1
    open_kind: str | None = None
    final: ChatChoice | None = None

    def close() -> Iterator[SseEvent]:
        nonlocal open_kind
        if open_kind == "thinking":
            yield event("content_block_delta", index=block, delta={"type": "signature_delta", "signature": ""})
        if open_kind is not None:
            yield event("content_block_stop", index=block)
        open_kind = None

    def open_block(kind: str, start: dict[str, Any]) -> Iterator[SseEvent]:
        nonlocal block, open_kind
        yield from close()
        block += 1
        open_kind = kind
        yield event("content_block_start", index=block, content_block=start)

    for delta in deltas:
        if isinstance(delta, Idle):
            yield delta
            continue
        if delta.reasoning:
            if open_kind != "thinking":
                yield from open_block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            yield event("content_block_delta", index=block, delta={"type": "thinking_delta",
                                                                   "thinking": delta.reasoning})
        if delta.content:
            if open_kind != "text":
                yield from open_block("text", {"type": "text", "text": ""})
            yield event("content_block_delta", index=block, delta={"type": "text_delta", "text": delta.content})
        if delta.choice is not None:
            final = delta.choice
    assert final is not None
    if block == -1 and not final.tool_calls:
        yield from open_block("text", {"type": "text", "text": ""})
    for call in final.tool_calls:
        yield from open_block("tool_use", {"type": "tool_use", "id": call.id, "name": call.name, "input": {}})
        yield event("content_block_delta", index=block, delta={"type": "input_json_delta",
                                                               "partial_json": call.arguments})
    yield from close()
    yield event("message_delta", delta={"stop_reason": _stop_reason(final), "stop_sequence": final.stop_word},
                usage={"output_tokens": final.completion.timings.predicted_n})
    yield event("message_stop")
