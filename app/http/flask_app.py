"""create_app: the single place that wires the Flask application from a route table."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import ClientDisconnected, HTTPException, MethodNotAllowed, NotFound, RequestEntityTooLarge

from app.http.access_log import install_access_log
from app.http.connection import close_after_response
from app.http.cors import DEFAULT_CORS, CorsPolicy
from app.http.disconnect import disconnect_probe
from app.http.middleware import install_middleware
from app.http.render import sse_body, to_response
from app.http.static_site import StaticSite
from app.protocol.api import ApiReply, ApiRequest, Route
from app.protocol.errors import (
    ApiError,
    InvalidRequestError,
    MethodNotAllowedError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RequestTimeoutError,
    UnavailableError,
)
from app.protocol.stream_sessions import HEADER as SESSION_HEADER
from app.protocol.stream_sessions import TOKEN_HEADER, NotTheOwner, StreamSession, StreamSessions, TooManySessions

log = logging.getLogger(__name__)



def flask_rule(path: str) -> str:
    """llama-server's ``/slots/:id_slot`` as Flask's ``/slots/<id_slot>``."""
    return "/".join(f"<{part[1:]}>" if part.startswith(":") else part for part in path.split("/"))


def tokens_of(body: Any) -> int | None:
    """Generated tokens, for the access log, from the shapes that carry them."""
    if isinstance(body, dict):
        usage = body.get("usage")
        if isinstance(usage, dict):
            value = usage.get("completion_tokens", usage.get("output_tokens"))
            return value if isinstance(value, int) else None
        value = body.get("tokens_predicted")
        return value if isinstance(value, int) else None
    return None


def _view(route: Route, sessions: StreamSessions | None) -> Callable[..., Response]:
    def view(**path_params: Any) -> Response:
        client_gone = disconnect_probe(request.environ)
        starts_session = route.streams and not route.replays and sessions is not None
        conversation = request.headers.get(SESSION_HEADER, "") if starts_session else ""
        try:
            session = sessions.create(conversation, request.headers.get(TOKEN_HEADER)) if (
                sessions is not None and conversation) else None
        except TooManySessions as exc:
            return to_response(ApiReply.error(UnavailableError(str(exc))))
        except NotTheOwner as exc:
            return to_response(ApiReply.error(PermissionDeniedError(str(exc))))
        body, files = _body_and_files(route.form)
        api_request = ApiRequest(
            method=request.method,
            path=route.path,
            body=body,
            files=files,
            params=request.args.to_dict(),
            headers=dict(request.headers),
            path_params={key: str(value) for key, value in path_params.items()},
            # a resumable stream goes on without its client, until it is cancelled (DELETE /v1/stream)
            should_stop=session.is_cancelled if session is not None else client_gone,
        )
        reply = route.handler(api_request)
        g.tokens = tokens_of(reply.body)
        if session is not None and sessions is not None:
            if reply.stream is None:  # nothing streamed: nothing to resume
                sessions.evict(conversation)
                return to_response(reply)
            response = to_response(replace(reply, stream=None, raw_stream=_teed(reply, session, client_gone)))
            response.headers[TOKEN_HEADER] = session.token  # the starter's, to read, cancel or replace it
            return response
        return to_response(reply)

    return view


def _body_and_files(takes_form: bool) -> tuple[bytes, dict[str, bytes]]:
    """The request body. As llama-server, a body is JSON whatever its Content-Type (curl's ``-d``
    labels it a URL-encoded form); only a route that takes a form (``Route.form``) reads one, as a
    JSON object of its text fields (a repeated field becomes a list) and its files."""
    if not takes_form or request.mimetype not in ("multipart/form-data", "application/x-www-form-urlencoded"):
        return request.get_data(cache=False), {}
    fields: dict[str, Any] = {}
    for key in request.form:
        values = request.form.getlist(key)
        fields[key] = values[0] if len(values) == 1 else values
    return json.dumps(fields).encode(), {key: upload.read() for key, upload in request.files.items()}


def _teed(reply: ApiReply, session: StreamSession, client_gone: Callable[[], bool]) -> Iterator[bytes]:
    """Write the stream into its session on a thread of its own, which runs to the stream's end
    whether or not the client stays; the client reads the session from its start."""
    assert reply.stream is not None
    events = sse_body(reply.stream, reply.stream_error, reply.heartbeat)

    def produce() -> None:
        try:
            for text in events:
                session.write(text.encode())
                if session.is_cancelled():
                    break
        finally:
            events.close()
            session.finish()

    threading.Thread(target=produce, name="resumable-stream", daemon=True).start()
    return session.read_from(0, client_gone)


def _static_view(site: StaticSite, path: str) -> Callable[[], Response]:
    def view() -> Response:
        return site.response(path)

    return view


def _static_paths(site: StaticSite | None, prefix: str, route_paths: set[str]) -> dict[str, str]:
    """URL -> the site's path, for every static file whose URL is not a route."""
    if site is None:
        return {}
    urls: dict[str, str] = {}
    for path in site.paths:
        url = prefix + path
        if url in route_paths:
            log.warning("static file %s is not served: %s is a route of this server", path, url)
        else:
            urls[url] = path
    return urls


def endpoint(route: Route) -> str:
    """The Flask endpoint name of a route of the table."""
    return f"{route.method} {route.path}"


def _http_error(exc: HTTPException) -> Response:
    """werkzeug's routing and body errors in llama-server's error body."""
    error: ApiError
    if isinstance(exc, NotFound):
        error = NotFoundError()
    elif isinstance(exc, MethodNotAllowed):
        allowed = ", ".join(sorted(exc.valid_methods or ()))
        error = MethodNotAllowedError(f"Method {request.method} is not allowed for {request.path}; use {allowed}")
    elif isinstance(exc, RequestEntityTooLarge):
        error = PayloadTooLargeError("the request body is too large")
    elif isinstance(exc, ClientDisconnected):  # the socket's --timeout ran out while reading the body
        error = RequestTimeoutError("the request body ended before its Content-Length: the client went away or "
                                    "sent nothing for --timeout seconds")
    else:
        error = InvalidRequestError(exc.description or exc.name)
    response = to_response(ApiReply.error(error))
    if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
        response.headers["Allow"] = ", ".join(sorted(exc.valid_methods))
    if isinstance(exc, ClientDisconnected):
        close_after_response()  # what is left of the body would be read as the next request
    return response

def _unexpected(exc: Exception) -> Response:
    log.exception("unhandled error in %s %s", request.method, request.path)
    return to_response(ApiReply.error(exc))


def create_app(
    routes: Sequence[Route],
    is_ready: Callable[[], bool],
    api_keys: Sequence[str] = (),
    prefix: str = "",
    max_body_bytes: int | None = None,
    is_draining: Callable[[], bool] = lambda: False,
    cors: CorsPolicy = DEFAULT_CORS,
    site: StaticSite | None = None,
    sessions: StreamSessions | None = None,
) -> Flask:
    """``site``: static files served at ``/`` (the web UI), public and answered while the model loads;
    a file whose path is a route of the table is not served (the route wins)."""
    app = Flask("vertex_llama")
    app.config["MAX_CONTENT_LENGTH"] = max_body_bytes
    public = {prefix + route.path for route in routes if route.public}
    route_paths = {prefix + flask_rule(route.path) for route in routes}
    static_paths = _static_paths(site, prefix, route_paths)
    install_access_log(app, quiet_endpoints=frozenset(endpoint(route) for route in routes if route.polled))
    while_loading = {prefix + route.path for route in routes if route.while_loading}
    install_middleware(app, is_ready, api_keys, public, is_draining, cors, always_open={*static_paths, *while_loading})
    for route in routes:
        app.add_url_rule(
            prefix + flask_rule(route.path),
            endpoint=endpoint(route),
            view_func=_view(route, sessions),
            methods=[route.method],
            provide_automatic_options=False,
        )
    if site is not None:
        for url, path in static_paths.items():
            app.add_url_rule(url, endpoint=f"static {path}", view_func=_static_view(site, path), methods=["GET"],
                             provide_automatic_options=False)

    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected)
    return app
