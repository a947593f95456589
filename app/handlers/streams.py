"""Resuming a stream (llama-server's ``/v1/stream`` API; the sessions are app/protocol/stream_sessions.py):
replay a conversation's stream from a byte offset and follow it, find sessions by id, cancel one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from app.handlers.context import ServerContext
from app.handlers.params import validate_body
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import InvalidRequestError, NotFoundError, PermissionDeniedError
from app.protocol.stream_sessions import TOKEN_HEADER, NotTheOwner, OffsetLost, StreamSession


class LookupBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    conversation_ids: list[Any] = []


def _conversation(request: ApiRequest) -> str:
    conversation = request.params.get("conv_id", "")
    if not conversation:
        raise InvalidRequestError("Missing conversation id in path")
    return conversation


def _owned_session(ctx: ServerContext, request: ApiRequest) -> StreamSession | None:
    """The named session, for its starter only (its X-Stream-Token, or ``token``), or any client of a
    keyed server (app/protocol/stream_sessions.py owns the rule)."""
    token = request.headers.get(TOKEN_HEADER) or request.params.get("token")
    try:
        return ctx.stream_sessions.owned(_conversation(request), token)
    except NotTheOwner as exc:
        raise PermissionDeniedError(str(exc)) from None


def get_stream(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    session = _owned_session(ctx, request)
    if session is None:
        raise NotFoundError("Stream not found or expired")
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
    _owned_session(ctx, request)
    ctx.stream_sessions.evict(_conversation(request), cancel=True)
    return ApiReply(status=204, text="", content_type="application/json")
