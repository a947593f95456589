"""ApiReply -> Flask response: JSON bodies, plain text, and server-sent event streams."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Generator, Iterator
from typing import Any

from flask import Response

from app.protocol.api import ApiReply, Heartbeat, Idle, SseEvent
from app.protocol.errors import error_object, is_expected

log = logging.getLogger(__name__)

JSON_TYPE = "application/json; charset=utf-8"


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sse_line(event: SseEvent) -> str:
    data = event.data if isinstance(event.data, str) else dumps(event.data)
    head = f"event: {event.event}\n" if event.event else ""
    return f"{head}data: {data}\n\n"


def default_stream_error(error: dict[str, Any]) -> SseEvent:
    return SseEvent({"error": error})


PING = ":\n\n"  # an SSE comment, for a stream's Idle: clients ignore it, idle-connection timeouts see traffic


def sse_body(events: Iterator[SseEvent | Idle], on_error: Callable[[dict[str, Any]], SseEvent] | None = None,
             heartbeat: Heartbeat | None = None) -> Generator[str, None, None]:
    """Write events, a comment for each IDLE (a beat of the stream's ``heartbeat`` at each write); an error
    once the stream has started is sent as one error event, then the stream ends (headers cannot change any
    more). The events are pulled on this thread, each once the one before is written (what
    app/engine/first_chunks.py counts on)."""
    try:
        for event in events:
            yield PING if isinstance(event, Idle) else sse_line(event)
            if heartbeat is not None:
                heartbeat.beat()
    except Exception as exc:
        if not is_expected(exc):
            log.exception("error in the middle of a stream")
        yield sse_line((on_error or default_stream_error)(error_object(exc)))
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()


def to_response(reply: ApiReply) -> Response:
    if reply.raw_stream is not None:
        response = Response(reply.raw_stream, status=reply.status,
                            content_type=reply.content_type or "text/event-stream")
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Accel-Buffering"] = "no"
    elif reply.stream is not None:
        response = Response(sse_body(reply.stream, reply.stream_error, reply.heartbeat), status=reply.status,
                            mimetype="text/event-stream")
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Accel-Buffering"] = "no"
    elif reply.text is not None:
        response = Response(reply.text, status=reply.status,
                            content_type=reply.content_type or "text/plain; charset=utf-8")
    else:
        response = Response(dumps(reply.body), status=reply.status, content_type=reply.content_type or JSON_TYPE)
    for name, value in reply.headers.items():
        response.headers[name] = value
    return response
