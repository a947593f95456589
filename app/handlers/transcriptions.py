"""POST /v1/audio/transcriptions (OpenAI's, as llama-server serves it): a multipart upload of an
audio file, transcribed by the chat model through its audio projector. The file becomes an audio
part of one user message ("Transcribe audio to text", or the request's prompt, with its language);
the answer is ``{"type": "transcript.text.done", "text", "usage"}``, or with ``stream`` its deltas."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from app.handlers.chat_pipeline import ChatDelta, chat_deltas, prepare_chat, run_chat, submit_chat
from app.handlers.context import ServerContext
from app.handlers.generation import ping_interval, stream_reply
from app.handlers.params import ChatBody, validate_body
from app.protocol.api import ApiReply, ApiRequest, Idle, SseEvent
from app.protocol.errors import InvalidRequestError, NotSupportedError

DEFAULT_PROMPT = "Transcribe audio to text"  # llama-server's


class TranscriptionBody(BaseModel):
    """The form's text fields (a form sends strings; numbers and booleans are read from them)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: str = ""
    language: str = ""
    response_format: str = "json"
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None


def _chat(request: ApiRequest, body: TranscriptionBody) -> ChatBody:
    audio = request.files.get("file")
    if audio is None:
        raise InvalidRequestError("No input file found for transcription (send it as the form's 'file')")
    if body.response_format != "json":
        raise InvalidRequestError("Field 'response_format': only 'json' is supported for transcription")
    prompt = body.prompt or DEFAULT_PROMPT
    if body.language:
        prompt += f" (language: {body.language})"
    passthrough = {key: value for key, value in (body.model_extra or {}).items() if key in ChatBody.model_fields}
    chat: dict[str, Any] = {
        **passthrough,  # as llama-server, the form's other fields reach the chat (ignore_eos, seed, ...)
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": prompt},
            {"type": "input_audio", "input_audio": {"data": base64.b64encode(audio).decode(), "format": "wav"}}]}],
        "stream": body.stream, "max_tokens": body.max_tokens, "temperature": body.temperature,
    }
    return validate_body(ChatBody, chat)


def post_transcriptions(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    if not ctx.engine.facts.audio:
        raise NotSupportedError("The current model does not support audio input.")
    body = validate_body(TranscriptionBody, request.json_object())
    prepared = prepare_chat(ctx, _chat(request, body))
    if body.stream:
        return stream_reply(submit_chat(ctx, prepared), request.should_stop,
                            lambda stream: _stream(chat_deltas(ctx, prepared, stream), prepared.n_prompt),
                            ping_seconds=ping_interval(ctx.settings.sse_ping_interval, None))
    choice = run_chat(ctx, prepared, request.should_stop)[0]
    return ApiReply(body=_done(choice.content, prepared.n_prompt, choice.completion.timings))


def _done(text: str, n_prompt: int, timings: Any) -> dict[str, Any]:
    output = timings.predicted_n
    return {"type": "transcript.text.done", "text": text, "usage": {
        "type": "tokens", "input_tokens": n_prompt, "output_tokens": output, "total_tokens": n_prompt + output,
        "input_tokens_details": {"cached_tokens": timings.cache_n}}}


def _stream(deltas: Iterator[ChatDelta | Idle], n_prompt: int) -> Iterator[SseEvent | Idle]:
    text = ""
    for delta in deltas:
        if isinstance(delta, Idle):
            yield delta
            continue
        if delta.content:
            text += delta.content
            yield SseEvent({"type": "transcript.text.delta", "delta": delta.content})
        if delta.choice is not None:
            yield SseEvent(_done(delta.choice.content or text, n_prompt, delta.choice.completion.timings))
    yield SseEvent("[DONE]")
