"""A request forwarded to a child, and its answer relayed back: JSON bodies as they are, event streams
chunk by chunk as the child writes them (nothing buffered), errors with the child's own status and body."""

from __future__ import annotations

import http.client
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlencode

from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import ServerError, error_object
from app.router.children import Child
from app.router.connections import CancelWatch, cut

log = logging.getLogger(__name__)

CHUNK_BYTES = 65536
# Not forwarded to the child: hop-by-hop headers, the length (recomputed), the client's credentials (the
# child has a key of its own) and the host.
DROPPED_REQUEST_HEADERS = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding",
    "upgrade", "host", "content-length", "authorization", "x-api-key", "expect",
})
# Not relayed to the client: hop-by-hop headers and those the router's own response writes.
DROPPED_REPLY_HEADERS = frozenset({
    "connection", "keep-alive", "transfer-encoding", "content-length", "content-type", "date", "server",
    "access-control-allow-origin", "vary",
})

WATCH = CancelWatch()


def target(request: ApiRequest, params: dict[str, str] | None = None) -> str:
    """The child's path: the route's path with its parameters filled in, and the query string."""
    path = "/".join(quote(request.path_params.get(part[1:], ""), safe="") if part.startswith(":") else part
                    for part in request.path.split("/"))
    query = urlencode(request.params if params is None else params)
    return f"{path}?{query}" if query else path


def body_of(request: ApiRequest) -> tuple[bytes | None, str | None]:
    """What the child is sent: the body as the client sent it (re-encoded where the router parsed it or
    a Vertex AI instance supplied it; a form upload as a multipart form)."""
    if request.method == "GET":
        return None, None
    if request.files:
        from urllib3 import encode_multipart_formdata

        fields: dict[str, Any] = {key: value if isinstance(value, str) else json.dumps(value)
                                  for key, value in request.json_object().items()}
        fields.update({key: (key, data) for key, data in request.files.items()})
        body, content_type = encode_multipart_formdata(fields)
        return body, content_type
    if request.body:
        return request.body, "application/json"
    value = request.json()
    return (None, None) if value is None else (json.dumps(value).encode(), "application/json")


def forward(child: Child, request: ApiRequest, path_target: str | None = None,
            extra_headers: dict[str, str] | None = None) -> ApiReply:
    """Send ``request`` to ``child`` and relay its answer; a child that cannot be reached is a 500."""
    body, content_type = body_of(request)
    headers = {name: value for name, value in request.headers.items() if name.lower() not in DROPPED_REQUEST_HEADERS}
    headers.update(child.headers())
    headers.update(extra_headers or {})
    if content_type is not None:
        headers["Content-Type"] = content_type
    try:
        connection, response = child.connections.request(request.method, path_target or target(request), body,
                                                         headers)
    except (OSError, http.client.HTTPException) as exc:
        raise ServerError(f"proxy error: model {child.name} did not answer ({type(exc).__name__}: {exc})") from None
    reply_headers = {name: value for name, value in response.getheaders()
                     if name.lower() not in DROPPED_REPLY_HEADERS}
    kind = response.getheader("Content-Type", "")
    if kind.startswith("text/event-stream"):
        return ApiReply(status=response.status, headers=reply_headers,
                        raw_stream=relay(child, connection, response, request.should_stop))
    key = WATCH.watch(request.should_stop, connection)
    try:
        data = response.read()
    except (OSError, http.client.HTTPException) as exc:
        cut(connection)
        raise ServerError(f"proxy error: model {child.name} went away ({type(exc).__name__})") from None
    finally:
        WATCH.unwatch(key)
    _give_back(child, connection, response)
    if kind.startswith("application/json"):
        try:
            return ApiReply(status=response.status, body=json.loads(data), headers=reply_headers)
        except ValueError:
            pass
    return ApiReply(status=response.status, text=data.decode("utf-8", "replace"), content_type=kind or None,
                    headers=reply_headers)


def _give_back(child: Child, connection: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
    if response.will_close:
        connection.close()
    else:
        child.connections.give_back(connection)


def relay(child: Child, connection: http.client.HTTPConnection, response: http.client.HTTPResponse,
          should_stop: Callable[[], bool]) -> Iterator[bytes]:
    """The child's event stream, each piece as it arrives; a child that dies mid-stream ends it with an
    error event. Closed early (the client went away), the connection is cut and the child cancels."""
    key = WATCH.watch(should_stop, connection)
    finished = False
    try:
        while True:
            try:
                piece = response.read1(CHUNK_BYTES)
            except (OSError, http.client.HTTPException) as exc:
                log.warning("model %s: the stream broke off (%s)", child.name, type(exc).__name__)
                error = ServerError(f"proxy error: model {child.name} went away in the middle of the stream")
                yield f"data: {json.dumps({'error': error_object(error)})}\n\n".encode()
                return
            if not piece:
                finished = True
                return
            yield piece
    finally:
        WATCH.unwatch(key)
        if finished:
            _give_back(child, connection, response)
        else:
            cut(connection)
