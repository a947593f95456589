"""The types every handler speaks, independent of any web framework: ApiRequest in, ApiReply out.

The Flask layer builds an ``ApiRequest`` from a real HTTP request; the Vertex predict layer builds
one per instance. ``guard`` turns any exception a handler raises into an error reply through the
one error table, so a handler never takes the server down.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from app.protocol.errors import InvalidRequestError, error_body, error_headers, is_expected

__all__ = [
    "ApiReply",
    "ApiRequest",
    "Handler",
    "InvalidRequestError",
    "Route",
    "SseEvent",
    "guard",
]

log = logging.getLogger(__name__)

_NO_JSON = object()


def _never_stop() -> bool:
    return False


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str
    body: bytes = b""
    params: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    path_params: Mapping[str, str] = field(default_factory=dict)
    should_stop: Callable[[], bool] = _never_stop
    parsed_body: Any = _NO_JSON
    files: Mapping[str, bytes] = field(default_factory=dict)  # a multipart form's files (its fields are the body)

    def json(self) -> Any:
        """The body as JSON (``None`` for an empty body); 400 naming the problem if it is not JSON."""
        if self.parsed_body is not _NO_JSON:
            return self.parsed_body
        if not self.body.strip():
            return None
        try:
            text = self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRequestError(f"the request body is not valid UTF-8: {exc}") from None
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as exc:
            raise InvalidRequestError(f"the request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise InvalidRequestError("the request body is nested too deeply") from None

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object; an empty body counts as ``{}`` (a JSON ``null`` does not)."""
        if self.parsed_body is _NO_JSON and not self.body.strip():
            return {}
        value = self.json()
        if not isinstance(value, dict):
            raise InvalidRequestError("the request body must be a JSON object")
        return value

    def with_json(self, value: Any, path: str | None = None) -> ApiRequest:
        return ApiRequest(
            method=self.method,
            path=path or self.path,
            body=b"",
            params=self.params,
            headers=self.headers,
            path_params=self.path_params,
            should_stop=self.should_stop,
            parsed_body=value,
        )


def _reject_constant(name: str) -> Any:
    raise InvalidRequestError(f"the request body is not valid JSON: {name} is not a JSON number")


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event: ``data`` is JSON-encoded unless it is a string (``[DONE]``)."""

    data: Any
    event: str | None = None


class Idle:
    """A stream's silence: nothing written for its ping interval (llama-server's ``sse_ping_interval``). It
    passes through a stream's every layer as it is, from where the engine's events are awaited
    (app/handlers/generation.py) to the writer, which sends an SSE comment (":") for it, so that proxies and
    clients that time out idle connections keep the stream. The request thread pulls the events itself."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "IDLE"


IDLE = Idle()


class Heartbeat:
    """When a stream last wrote, and so when an IDLE is due: the writer beats at each write
    (app/http/render.py); where the events are awaited an IDLE is passed on once ``seconds`` have gone by
    without a beat, whether events came meanwhile or not (a tool call held back until it is whole writes
    nothing), and beats for it (so a reader that writes no pings, gRPC's, gets one IDLE an interval). One
    thread, the request's, does both. ``seconds`` 0 or less: never."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._last = time.monotonic()

    def beat(self) -> None:
        self._last = time.monotonic()

    def due_at(self) -> float:
        """The monotonic time an IDLE is due at (infinity when pings are off)."""
        return self._last + self.seconds if self.seconds > 0 else math.inf


@dataclass(frozen=True)
class ApiReply:
    status: int = 200
    body: Any = None
    text: str | None = None
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    stream: Iterator[SseEvent | Idle] | None = None
    # How an error in the middle of the stream is sent, from its error object; by default
    # ``data: {"error": {...}}``. (Anthropic streams send ``event: error`` with the bare object.)
    stream_error: Callable[[dict[str, Any]], SseEvent] | None = None
    heartbeat: Heartbeat | None = None  # the stream's, which its writer marks (its IDLEs come from it)
    # Server-sent events already written out (a replay of a resumable stream, app/protocol/stream_sessions.py).
    raw_stream: Iterator[bytes] | None = None

    @classmethod
    def error(cls, exc: BaseException) -> ApiReply:
        status, body = error_body(exc)
        return cls(status=status, body=body, headers=error_headers(exc))


Handler = Callable[[ApiRequest], ApiReply]


def guard(handler: Handler) -> Handler:
    """Wrap a handler so that every exception becomes an error reply from the error table."""

    def guarded(request: ApiRequest) -> ApiReply:
        try:
            return handler(request)
        except Exception as exc:
            if not is_expected(exc):
                log.exception("unexpected error in %s %s", request.method, request.path)
            return ApiReply.error(exc)

    guarded.__name__ = getattr(handler, "__name__", "handler")
    guarded.__doc__ = handler.__doc__
    return guarded


@dataclass(frozen=True)
class Route:
    """A route bound to a server: ``handler`` takes an ApiRequest and never raises. ``name`` is the
    handler's name: two routes with the same name are the same endpoint."""

    method: str
    path: str
    name: str
    handler: Handler
    public: bool = False
    body: type[BaseModel] | None = None  # the request schema the handler validates with
    streams: bool = False  # may answer text/event-stream
    summary: str = ""
    polled: bool = False  # asked for over and over (health checks, model lists): a success is logged at debug
    form: bool = False  # takes a form (multipart or URL-encoded); every other route reads its body as JSON
    replays: bool = False  # streams a session back (GET /v1/stream): never starts one of its own
    local: bool = False  # answered by the server itself with no model behind it: a router keeps its handler
    while_loading: bool = False  # answered while the model loads too (liveness), not the loading gate's 503
