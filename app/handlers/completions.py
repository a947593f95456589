"""POST /completion, /completions (llama.cpp's native API) and POST /v1/completions (OpenAI)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.api import ApiReply, ApiRequest, SseEvent
from app.context import ServerContext
from app.engine import Completion, GenerationRequest, TokenChunk
from app.handlers.generation import JobGroup, started_stream
from app.handlers.params import GenerationFields, generation_request, validate_body
from app.handlers.prompts import split_prompts, tokenize_prompt
from app.handlers.shapes import (
    finish_reason,
    merged_timings,
    native_final,
    openai_envelope,
    random_id,
    timings_body,
    usage_body,
)


class CompletionBody(GenerationFields):
    prompt: Any


def _requests(ctx: ServerContext, body: CompletionBody) -> list[GenerationRequest]:
    vocab = ctx.engine.vocab
    add_special = ctx.engine.info.add_bos
    return [
        generation_request(ctx, body, tokenize_prompt(vocab, prompt, add_special))
        for prompt in split_prompts(body.prompt)
    ]


def post_completion(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(CompletionBody, request.json_object())
    requests = _requests(ctx, body)
    group = JobGroup(ctx.engine, requests)
    if body.stream:
        return ApiReply(stream=_native_stream(ctx, group, requests, request))
    results = group.results(request.should_stop)
    finals = [
        native_final(ctx, requests[index], result, index, False, body.return_tokens)
        for index, result in enumerate(results)
    ]
    return ApiReply(body=finals[0] if len(finals) == 1 else finals)


def _native_stream(
    ctx: ServerContext, group: JobGroup, requests: list[GenerationRequest], request: ApiRequest
) -> Iterator[SseEvent]:
    for item in started_stream(group, request.should_stop):
        event = item.event
        if isinstance(event, TokenChunk):
            chunk: dict[str, Any] = {
                "index": item.index,
                "content": event.text,
                "tokens": list(event.tokens),
                "stop": False,
                "id_slot": event.id_slot,
                "tokens_predicted": event.n_predicted,
                "tokens_evaluated": len(requests[item.index].prompt),
            }
            yield SseEvent(chunk)
        else:
            yield SseEvent(native_final(ctx, requests[item.index], event, item.index, True, False))


def post_openai_completions(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(CompletionBody, request.json_object())
    requests = _requests(ctx, body)
    group = JobGroup(ctx.engine, requests)
    response_id = random_id("chatcmpl-")
    if body.stream:
        return ApiReply(stream=_openai_stream(ctx, group, request, response_id, body.include_usage()))
    results = group.results(request.should_stop)
    reply = openai_envelope(ctx, "text_completion", response_id)
    reply["choices"] = [
        {"text": result.text, "index": index, "logprobs": None, "finish_reason": finish_reason(result)}
        for index, result in enumerate(results)
    ]
    reply["usage"] = usage_body(results)
    reply["timings"] = merged_timings(results)
    return ApiReply(body=reply)


def _openai_stream(
    ctx: ServerContext, group: JobGroup, request: ApiRequest, response_id: str, include_usage: bool
) -> Iterator[SseEvent]:
    results: list[Completion] = []
    for item in started_stream(group, request.should_stop):
        event = item.event
        chunk = openai_envelope(ctx, "text_completion", response_id)
        if isinstance(event, TokenChunk):
            chunk["choices"] = [{"text": event.text, "index": item.index, "logprobs": None,
                                 "finish_reason": None}]
        else:
            results.append(event)
            chunk["choices"] = [{"text": "", "index": item.index, "logprobs": None,
                                 "finish_reason": finish_reason(event)}]
            if len(results) == len(group.jobs) and not include_usage:
                chunk["timings"] = timings_body(event.timings)
        yield SseEvent(chunk)
    if include_usage and results:
        chunk = openai_envelope(ctx, "text_completion", response_id)
        chunk["choices"] = []
        chunk["usage"] = usage_body(results)
        chunk["timings"] = merged_timings(results)
        yield SseEvent(chunk)
    yield SseEvent("[DONE]")
