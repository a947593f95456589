"""Resuming a stream (llama-server's ``/v1/stream`` API; the sessions are app/protocol/stream_sessions.py):
replay a conversation's stream from a byte offset and follow it, find sessions by id, cancel one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from app.handlers.context import ServerContext
from app.handlers.params import validate_body
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import InvalidRequestError, NotFoundError, PermissionDeniedError
from app.protocol.stream_sessions import TOKEN_HEADER, OffsetLost, StreamSession


class LookupBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    conversation_ids: list[Any] = []


def _conversation(request: ApiRequest) -> str:
    conversation = request.params.get("conv_id", "")
    if not conversation:
        raise InvalidRequestError("Missing conversation id in path")
    return conversation


def _check_owner(ctx: ServerContext, request: ApiRequest, session: StreamSession) -> None:
    """Only the client that started a session reads or cancels it (its X-Stream-Token), or any client of
    a server with API keys (the middleware checked the key)."""
    token = request.headers.get(TOKEN_HEADER) or request.params.get("token")
    if not ctx.api_keys and not session.owned_by(token):
        raise PermissionDeniedError(f"this stream belongs to the client that started it: give its {TOKEN_HEADER}")


def get_stream(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    session = ctx.stream_sessions.get(_conversation(request))
    if session is None:
        raise NotFoundError("Stream not found or expired")
    _check_owner(ctx, request, session)
    try:
        offset = int(request.params.get("from", "0") or "0")
        if offset < 0:
            raise ValueError(offset)
    except ValueError:
        raise InvalidRequestError("Invalid 'from' offset") from None
    try:
        session.check_offset(offset)
    except OffsetLost:
        raise InvalidRequestError("Stream offset lost, please restart") from None
    return ApiReply(raw_stream=session.read_from(offset, request.should_stop))


def post_streams_lookup(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(LookupBody, request.json_object())
    wanted = [item for item in body.conversation_ids if isinstance(item, str) and item]
    return ApiReply(body=[{"conversation_id": info.conversation_id, "is_done": info.is_done,
                           "total_bytes": info.total_bytes, "started_at": info.started_at,
                           "completed_at": info.completed_at} for info in ctx.stream_sessions.lookup(wanted)])


def delete_stream(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    """The user's Stop: the stream's generation is cancelled and its session dropped (204, also
    when there was none)."""
    conversation = _conversation(request)
    session = ctx.stream_sessions.get(conversation)
    if session is not None:
        _check_owner(ctx, request, session)
    ctx.stream_sessions.evict(conversation, cancel=True)
    return ApiReply(status=204, text="", content_type="application/json")
