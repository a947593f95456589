"""POST /v1/responses, /responses (OpenAI Responses, answered through the chat pipeline) and their
input-token count."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from app.handlers.chat_pipeline import (
    ChatChoice,
    ChatDelta,
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
from app.handlers.shapes import random_id, timings_body
from app.protocol.api import ApiReply, ApiRequest, Idle, SseEvent
from app.protocol.errors import InvalidRequestError


class TextPart(BaseModel):
    type: Literal["input_text", "output_text", "text"]
    text: str


class ImagePart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None


InputPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class MessageItem(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[InputPart]


class FunctionCallItem(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call"]
    call_id: str | None = None
    id: str | None = None
    name: str
    arguments: str = "{}"


class FunctionCallOutputItem(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call_output"]
    call_id: str
    output: Any = ""


class ReasoningItem(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["reasoning"]


def _item_kind(item: Any) -> str | None:
    """The tag of an input item: its ``type``, ``message`` when it has none (as OpenAI allows)."""
    if isinstance(item, dict):
        kind = item.get("type", "message")
        return kind if isinstance(kind, str) else None
    return getattr(item, "type", None)


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")] | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(_item_kind, custom_error_type="input_item_type",
                  custom_error_message="unknown input item type (this server takes message, function_call, "
                                       "function_call_output and reasoning items)"),
]


class ResponsesBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    previous_response_id: str | None = None
    model: str | None = None
    reasoning: dict[str, Any] | None = None  # {"effort": ...}: the chat's reasoning_effort


def _content(content: str | list[InputPart], field: str) -> str | list[dict[str, Any]]:
    """A message's content as chat content: text, or chat parts when it holds images."""
    if isinstance(content, str):
        return content
    if all(isinstance(part, TextPart) for part in content):
        return "\n".join(part.text for part in content if isinstance(part, TextPart))
    parts: list[dict[str, Any]] = []
    for number, part in enumerate(content):
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        elif part.image_url is None:
            raise InvalidRequestError(f"Field '{field}.{number}.image_url': required (file_id is not supported "
                                      "here: there is no file store)")
        else:
            parts.append({"type": "image_url", "image_url": {"url": part.image_url},
                          SOURCE_FIELD: f"{field}.{number}"})
    return parts


def _messages(body: ResponsesBody) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        return [*messages, {"role": "user", "content": body.input}]
    for number, item in enumerate(body.input):
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": _content(item.content, f"input.{number}.content")})
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id or item.id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            if messages and messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls"):
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            output = item.output
            messages.append({"role": "tool", "tool_call_id": item.call_id,
                             "content": output if isinstance(output, str) else json.dumps(output)})
    return messages


def _tools(body: ResponsesBody) -> list[dict[str, Any]] | None:
    if not body.tools:
        return None
    tools = []
    for number, tool in enumerate(body.tools):
        if tool.get("type") != "function":
            raise InvalidRequestError(f"Field 'tools.{number}.type': only function tools are supported")
        function = {key: tool[key] for key in ("name", "description", "parameters") if key in tool}
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_schema":
        if "schema" not in fmt:
            raise InvalidRequestError("Field 'text.format.schema': a JSON schema is required")
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": fmt["schema"]}}
    return {"type": fmt.get("type")}


def to_chat(body: ResponsesBody) -> ChatBody:
    if body.previous_response_id:
        raise InvalidRequestError("Field 'previous_response_id': this server keeps no conversation state; "
                                  "send the whole conversation in 'input'")
    chat: dict[str, Any] = {
        "messages": _messages(body),
        "tools": _tools(body),
        "tool_choice": _tool_choice(body.tool_choice),
        "parallel_tool_calls": body.parallel_tool_calls,
        "response_format": _response_format(body.text),
        "max_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "reasoning_effort": (body.reasoning or {}).get("effort"),
        "stream": body.stream,
    }
    passthrough = {key: value for key, value in (body.model_extra or {}).items() if key in ChatBody.model_fields}
    return validate_body(ChatBody, {**passthrough, **chat})


def _usage(choice: ChatChoice, n_prompt: int) -> dict[str, Any]:
    cached = choice.completion.timings.cache_n
    output = choice.completion.timings.predicted_n
    return {"input_tokens": n_prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": n_prompt + output}


class _Ids:
    def __init__(self) -> None:
        self.response = random_id("resp_")
        self.reasoning = random_id("rs_")
        self.message = random_id("msg_")


def _reasoning_item(ids: _Ids, text: str, status: str) -> dict[str, Any]:
    return {"id": ids.reasoning, "type": "reasoning", "summary": [], "status": status, "encrypted_content": "",
            "content": [{"type": "reasoning_text", "text": text}]}


def _message_item(ids: _Ids, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"id": ids.message, "type": "message", "role": "assistant", "status": status, "content": content}


def _call_item(call: Any, arguments: str, status: str) -> dict[str, Any]:
    return {"id": "fc_" + call.id.removeprefix("call_"), "type": "function_call", "status": status,
            "call_id": call.id, "name": call.name, "arguments": arguments}


def _output(ids: _Ids, choice: ChatChoice) -> list[dict[str, Any]]:
    output = []
    if choice.reasoning:
        output.append(_reasoning_item(ids, choice.reasoning, "completed"))
    if choice.content or not choice.tool_calls:
        output.append(_message_item(ids, choice.content, _message_status(choice)))
    output.extend(_call_item(call, call.arguments, "completed") for call in choice.tool_calls)
    return output


def _envelope(ctx: ServerContext, ids: _Ids, body: ResponsesBody, created: int, status: str) -> dict[str, Any]:
    return {
        "id": ids.response, "object": "response", "created_at": created, "status": status,
        "model": ctx.model_name, "output": [], "error": None, "incomplete_details": None,
        "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
        "parallel_tool_calls": bool(body.parallel_tool_calls), "temperature": body.temperature,
        "top_p": body.top_p, "tool_choice": body.tool_choice or "auto", "tools": body.tools or [],
        "text": body.text or {"format": {"type": "text"}}, "metadata": {},
    }


def _message_status(choice: ChatChoice) -> str:
    return "incomplete" if choice.finish_reason == "length" else "completed"


def _finished(ctx: ServerContext, ids: _Ids, body: ResponsesBody, created: int, choice: ChatChoice,
              n_prompt: int) -> dict[str, Any]:
    """The final response object: ``incomplete`` with its reason when max_output_tokens cut it, as
    OpenAI's API reports it; ``completed`` otherwise."""
    status = _message_status(choice)
    cut = status == "incomplete"
    reply = _envelope(ctx, ids, body, created, status)
    reply.update(output=_output(ids, choice), usage=_usage(choice, n_prompt), completed_at=int(time.time()),
                 incomplete_details={"reason": "max_output_tokens"} if cut else None)
    return reply


def post_responses(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(ResponsesBody, request.json_object())
    prepared = prepare_chat(ctx, to_chat(body))
    ids = _Ids()
    created = int(time.time())
    if body.stream:
        return stream_reply(submit_chat(ctx, prepared), request.should_stop,
                            lambda stream: _stream(ctx, body, prepared, chat_deltas(ctx, prepared, stream), ids,
                                                   created),
                            ping_seconds=ping_interval(ctx.settings.sse_ping_interval, None))
    choice = run_chat(ctx, prepared, request.should_stop)[0]
    return ApiReply(body=_finished(ctx, ids, body, created, choice, prepared.n_prompt))


def post_responses_input_tokens(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(ResponsesBody, request.json_object())
    tokens = chat_prompt_tokens(ctx, to_chat(body)).tokens
    return ApiReply(body={"input_tokens": len(tokens), "object": "response.input_tokens"})


def _close_message(event: Callable[..., SseEvent], ids: _Ids, index: int, text: str,
                   final: ChatChoice) -> Iterator[SseEvent]:
    """The events that end the streamed message: its text, its content part, the item."""
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    yield event("response.output_text.done", item_id=ids.message, output_index=index, content_index=0, text=text,
                logprobs=[])
    yield event("response.content_part.done", item_id=ids.message, output_index=index, content_index=0, part=part)
    yield event("response.output_item.done", output_index=index, item=_message_item(ids, text, _message_status(final)))


def _tool_call_events(event: Callable[..., SseEvent], final: ChatChoice, next_index: int) -> Iterator[SseEvent]:
    """Each tool call of the answer as its own output item, from ``next_index`` on."""
    for index, call in enumerate(final.tool_calls, start=next_index):
        item = _call_item(call, "", "in_progress")
        yield event("response.output_item.added", output_index=index, item=item)
        yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                    delta=call.arguments)
        yield event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                    arguments=call.arguments)
        yield event("response.output_item.done", output_index=index, item=_call_item(call, call.arguments, "completed"))


def _stream(ctx: ServerContext, body: ResponsesBody, prepared: Any, deltas: Iterator[ChatDelta | Idle], ids: _Ids,
             created: int) -> Iterator[SseEvent | Idle]:
    sequence = 0

    def event(kind: str, **data: Any) -> SseEvent:
        nonlocal sequence
        sequence += 1
        return SseEvent({"type": kind, "sequence_number": sequence - 1, **data}, event=kind)

    envelope = _envelope(ctx, ids, body, created, "in_progress")
    yield event("response.created", response=envelope)
    yield event("response.in_progress", response=envelope)
    reasoning, text = "", ""
    reasoning_index: int | None = None
    message_index: int | None = None
    next_index = 0
    final: ChatChoice | None = None
    for delta in deltas:
        if isinstance(delta, Idle):
            yield delta
            continue
        if delta.reasoning:
            if reasoning_index is None:
                reasoning_index, next_index = next_index, next_index + 1
                yield event("response.output_item.added", output_index=reasoning_index,
                            item=_reasoning_item(ids, "", "in_progress"))
            reasoning += delta.reasoning
            yield event("response.reasoning_text.delta", item_id=ids.reasoning, output_index=reasoning_index,
                        content_index=0, delta=delta.reasoning, **delta.extras)
        if delta.content:
            if reasoning_index is not None and message_index is None:
                yield event("response.output_item.done", output_index=reasoning_index,
                            item=_reasoning_item(ids, reasoning, "completed"))
            if message_index is None:
                message_index, next_index = next_index, next_index + 1
                yield from _open_message(event, ids, message_index)
            text += delta.content
            yield event("response.output_text.delta", item_id=ids.message, output_index=message_index,
                        content_index=0, delta=delta.content, logprobs=[], **delta.extras)
        if delta.choice is not None:
            final = delta.choice
    assert final is not None
    if reasoning_index is not None and message_index is None:
        yield event("response.output_item.done", output_index=reasoning_index,
                    item=_reasoning_item(ids, reasoning, "completed"))
    if message_index is None and not final.tool_calls:
        message_index, next_index = next_index, next_index + 1
        yield from _open_message(event, ids, message_index)
    if message_index is not None:
        yield from _close_message(event, ids, message_index, text, final)
    yield from _tool_call_events(event, final, next_index)
    done = _finished(ctx, ids, body, created, final, prepared.n_prompt)
    yield event(f"response.{done['status']}", response=done, timings=timings_body(final.completion.timings))


def _open_message(event: Any, ids: _Ids, index: int) -> Iterator[SseEvent]:
    yield event("response.output_item.added", output_index=index, item=_message_item(ids, None, "in_progress"))
    yield event("response.content_part.added", item_id=ids.message, output_index=index, content_index=0,
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})
