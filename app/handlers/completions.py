"""POST /completion, /completions (llama.cpp's native API) and POST /v1/completions (OpenAI)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import Field

from app.engine import Completion, GenerationRequest, TokenChunk
from app.handlers.context import ServerContext
from app.handlers.generation import JobGroup, Streamed, ping_interval, stream_reply
from app.handlers.media import prompt_object
from app.handlers.params import GenerationFields, completions_count, generation_request, validate_body
from app.handlers.prompt_log import log_prompt
from app.handlers.prompts import split_prompts, tokenize_prompt
from app.handlers.shapes import (
    chunk_extras,
    finish_reason,
    legacy_logprobs,
    merged_timings,
    native_final,
    openai_envelope,
    probability_entries,
    probs_within_text,
    random_id,
    timings_body,
    usage_body,
    verbose_answer,
)
from app.protocol.api import ApiReply, ApiRequest, Idle, SseEvent
from app.protocol.errors import InvalidRequestError


class CompletionBody(GenerationFields):
    prompt: Any
    logprobs: int | None = Field(None, ge=0, le=100)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1)
    response_fields: list[str] | None = None


def _requests(ctx: ServerContext, body: CompletionBody) -> list[GenerationRequest]:
    if body.echo:
        raise InvalidRequestError("Field 'echo': echoing the prompt is not supported")
    if body.suffix:
        raise InvalidRequestError("Field 'suffix': use POST /infill for fill-in-the-middle")
    if body.best_of not in (None, 1):
        raise InvalidRequestError("Field 'best_of': only 1 is supported; use n for several completions")
    vocab = ctx.engine.vocab
    add_special = ctx.engine.info.add_bos
    n_probs = body.n_probs if body.n_probs is not None else body.logprobs
    prompts = split_prompts(body.prompt)
    requests = []
    for number, prompt in enumerate(prompts):
        if isinstance(prompt, dict):
            field = "prompt" if len(prompts) == 1 and isinstance(body.prompt, dict) else f"prompt.{number}"
            tokens, media = prompt_object(ctx, prompt, field, add_special)
        else:
            tokens, media = tokenize_prompt(vocab, prompt, add_special), ()
        requests.append(generation_request(ctx, body, tokens, n_probs=n_probs, media=media))
    return requests


def _project(body: dict[str, Any], fields: list[str] | None) -> dict[str, Any]:
    """``response_fields``: keep only these (``a/b`` reads a nested field into a key named ``a/b``)."""
    if not fields:
        return body
    projected: dict[str, Any] = {}
    for path in fields:
        value: Any = body
        for part in path.split("/"):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            projected[path] = value
    return projected


def native_body(ctx: ServerContext, request: GenerationRequest, result: Completion, index: int,
                stream: bool, return_tokens: bool) -> dict[str, Any]:
    body = native_final(ctx, request, result, index, stream, return_tokens)
    if request.sampling.n_probs > 0 and not stream:
        probs = probs_within_text(ctx.engine.vocab, result)
        body["completion_probabilities"] = probability_entries(
            ctx.engine.vocab, probs, request.sampling.post_sampling_probs
        )
    return body


def post_completion(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(CompletionBody, request.json_object())
    requests = _requests(ctx, body)
    log_prompt(ctx.settings.log_prompts_dir, body.prompt)
    copies = completions_count(body)
    group = JobGroup(ctx.engine, requests, copies)
    if body.stream:
        return stream_reply(group, request.should_stop,
                            lambda stream: native_stream(ctx, stream, requests, copies),
                            ping_seconds=ping_interval(ctx.settings.sse_ping_interval, body.sse_ping_interval))
    results = group.results(request.should_stop)
    finals = [
        _project(native_body(ctx, requests[index // copies], result, index, False, body.return_tokens),
                 body.response_fields)
        for index, result in enumerate(results)
    ]
    return ApiReply(body=finals[0] if len(finals) == 1 else finals)


def native_stream(
    ctx: ServerContext, stream: Iterator[Streamed | Idle], requests: list[GenerationRequest], copies: int
) -> Iterator[SseEvent | Idle]:
    for item in stream:
        if isinstance(item, Idle):
            yield item
            continue
        event = item.event
        job_request = requests[item.index // copies]
        if isinstance(event, TokenChunk):
            chunk: dict[str, Any] = {
                "index": item.index,
                "content": event.text,
                "tokens": list(event.tokens),
                "stop": False,
                "id_slot": event.id_slot,
                "tokens_predicted": event.n_predicted,
                "tokens_evaluated": len(job_request.prompt),
            }
            if job_request.sampling.n_probs > 0 and event.progress is None:
                chunk["completion_probabilities"] = probability_entries(
                    ctx.engine.vocab, event.probs, job_request.sampling.post_sampling_probs
                )
            yield SseEvent(chunk | chunk_extras(event))
        else:
            yield SseEvent(native_final(ctx, job_request, event, item.index, True, False))


def _choice_logprobs(ctx: ServerContext, request: GenerationRequest, probs: Any) -> dict[str, Any] | None:
    if request.sampling.n_probs <= 0:
        return None
    return legacy_logprobs(probability_entries(ctx.engine.vocab, probs, request.sampling.post_sampling_probs))


def post_openai_completions(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(CompletionBody, request.json_object())
    requests = _requests(ctx, body)
    log_prompt(ctx.settings.log_prompts_dir, body.prompt)
    copies = completions_count(body)
    group = JobGroup(ctx.engine, requests, copies)
    response_id = random_id("chatcmpl-")
    if body.stream:
        return stream_reply(group, request.should_stop, lambda stream: _openai_stream(
            ctx, stream, group.size, requests, copies, response_id, body.include_usage()),
            ping_seconds=ping_interval(ctx.settings.sse_ping_interval, body.sse_ping_interval))
    results = group.results(request.should_stop)
    reply = openai_envelope(ctx, "text_completion", response_id)
    reply["choices"] = [
        {
            "text": result.text,
            "index": index,
            "logprobs": _choice_logprobs(ctx, requests[index // copies], probs_within_text(ctx.engine.vocab, result)),
            "finish_reason": finish_reason(result),
        }
        for index, result in enumerate(results)
    ]
    reply["usage"] = usage_body(results, copies)
    reply["timings"] = merged_timings(results)
    if verbose_answer(ctx, body):
        reply["__verbose"] = native_final(ctx, requests[0], results[0], 0, False, False)
    return ApiReply(body=reply)


def _openai_stream(
    ctx: ServerContext,
    stream: Iterator[Streamed | Idle],
    size: int,
    requests: list[GenerationRequest],
    copies: int,
    response_id: str,
    include_usage: bool,
) -> Iterator[SseEvent | Idle]:
    results: dict[int, Completion] = {}
    for item in stream:
        if isinstance(item, Idle):
            yield item
            continue
        event = item.event
        chunk = openai_envelope(ctx, "text_completion", response_id)
        if isinstance(event, TokenChunk):
            chunk["choices"] = [{
                "text": event.text,
                "index": item.index,
                "logprobs": _choice_logprobs(ctx, requests[item.index // copies], event.probs),
                "finish_reason": None,
            }]
            chunk |= chunk_extras(event)
        else:
            results[item.index] = event
            chunk["choices"] = [{"text": "", "index": item.index, "logprobs": None,
                                 "finish_reason": finish_reason(event)}]
            if len(results) == size and not include_usage:
                chunk["timings"] = timings_body(event.timings)
        yield SseEvent(chunk)
    if include_usage and results:
        chunk = openai_envelope(ctx, "text_completion", response_id)
        chunk["choices"] = []
        ordered = [results[index] for index in sorted(results)]
        chunk["usage"] = usage_body(ordered, copies)
        chunk["timings"] = merged_timings(ordered)
        yield SseEvent(chunk)
    yield SseEvent("[DONE]")
