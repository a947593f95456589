"""POST /v1/chat/completions, /chat/completions, /apply-template and the chat input-token count."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict

from app.handlers.chat_pipeline import (
    ChatChoice,
    ChatDelta,
    chat_deltas,
    chat_prompt_tokens,
    prepare_chat,
    render_prompt,
    run_chat,
    submit_chat,
    tool_plan,
)
from app.handlers.context import ServerContext
from app.handlers.generation import ping_interval, stream_reply
from app.handlers.params import ChatBody, validate_body
from app.handlers.shapes import (
    merged_timings,
    native_final,
    openai_envelope,
    random_id,
    timings_body,
    usage_body,
    verbose_answer,
)
from app.protocol.api import ApiReply, ApiRequest, Idle, SseEvent
from app.protocol.errors import InvalidRequestError


def post_apply_template(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(ChatBody, request.json_object())
    return ApiReply(body={"prompt": render_prompt(ctx, body, tool_plan(ctx, body))[0]})


def post_chat_input_tokens(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(ChatBody, request.json_object())
    tokens = chat_prompt_tokens(ctx, body).tokens
    return ApiReply(body={"input_tokens": len(tokens), "object": "response.input_tokens"})


def message_body(choice: ChatChoice) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if choice.tool_calls and not choice.content else choice.content,
    }
    if choice.reasoning:
        message["reasoning_content"] = choice.reasoning
    if choice.tool_calls:
        message["tool_calls"] = [call.openai() for call in choice.tool_calls]
    return message


class ControlBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = ""
    action: str = ""


def post_chat_control(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    """llama-server's control of a running chat: ``reasoning_end`` forces the end of its thinking
    (the chat asked for ``reasoning_control``)."""
    body = validate_body(ControlBody, request.json_object())
    if not body.id:
        raise InvalidRequestError("missing completion id")
    if body.action != "reasoning_end":
        raise InvalidRequestError("unknown control action")
    done, why = ctx.engine.end_reasoning(body.id)
    return ApiReply(body={"success": True} if done else {"success": False, "message": why})


def post_chat_completions(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(ChatBody, request.json_object())
    response_id = random_id("chatcmpl-")
    prepared = prepare_chat(ctx, body)
    prepared = replace(prepared, request=replace(prepared.request, completion_id=response_id))
    if body.stream:
        return stream_reply(submit_chat(ctx, prepared), request.should_stop, lambda stream: _chat_stream(
            ctx, chat_deltas(ctx, prepared, stream, progress=True), prepared.copies, response_id, body.include_usage()),
            ping_seconds=ping_interval(ctx.settings.sse_ping_interval, body.sse_ping_interval))
    choices = run_chat(ctx, prepared, request.should_stop)
    results = [choice.completion for choice in choices]
    reply = openai_envelope(ctx, "chat.completion", response_id)
    reply["choices"] = [
        {
            "finish_reason": choice.finish_reason,
            "index": choice.index,
            "message": message_body(choice),
            "logprobs": None if choice.logprobs is None else {"content": choice.logprobs},
        }
        for choice in choices
    ]
    reply["usage"] = usage_body(results, prepared.copies)
    reply["timings"] = merged_timings(results)
    if verbose_answer(ctx, body):
        reply["__verbose"] = native_final(ctx, prepared.request, results[0], 0, False, False)
    return ApiReply(body=reply)


def _chat_stream(
    ctx: ServerContext, deltas: Iterator[ChatDelta | Idle], copies: int, response_id: str, include_usage: bool
) -> Iterator[SseEvent | Idle]:
    def chunk(choices: list[dict[str, Any]]) -> dict[str, Any]:
        body = openai_envelope(ctx, "chat.completion.chunk", response_id)
        body["choices"] = choices
        return body

    finished: list[ChatChoice] = []
    started: set[int] = set()
    for delta in deltas:
        if isinstance(delta, Idle):
            yield delta
            continue
        index = delta.index
        if delta.progress:  # as llama-server: the opening delta, with prompt_progress
            yield SseEvent(chunk([{"finish_reason": None, "index": index,
                                   "delta": {"role": "assistant", "content": None}}]) | delta.extras)
            continue
        if index not in started:
            started.add(index)
            yield SseEvent(chunk([{"finish_reason": None, "index": index,
                                   "delta": {"role": "assistant", "content": None}}]))
        content: dict[str, Any] = {}
        if delta.reasoning:
            content["reasoning_content"] = delta.reasoning
        if delta.content:
            content["content"] = delta.content
        if delta.tool_calls:
            content["tool_calls"] = [call.openai(number) for number, call in enumerate(delta.tool_calls)]
        if content or delta.logprobs:
            piece: dict[str, Any] = {"finish_reason": None, "index": index, "delta": content}
            if delta.logprobs:
                piece["logprobs"] = {"content": delta.logprobs}
            yield SseEvent(chunk([piece]) | delta.extras)
        if delta.choice is None:
            continue
        finished.append(delta.choice)
        final = chunk([{"finish_reason": delta.choice.finish_reason, "index": index, "delta": {}}])
        if len(finished) == copies and not include_usage:
            final["timings"] = timings_body(delta.choice.completion.timings)
        yield SseEvent(final)
    if include_usage and finished:
        results = [choice.completion for choice in sorted(finished, key=lambda c: c.index)]
        usage = chunk([])
        usage["usage"] = usage_body(results, copies)
        usage["timings"] = merged_timings(results)
        yield SseEvent(usage)
    yield SseEvent("[DONE]")
