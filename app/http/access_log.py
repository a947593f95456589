"""One access line per request (method, path, status, latency, tokens, request id; never the body
or the headers), and the request id: taken from ``X-Request-Id`` (or Cloud Trace's header), made
up otherwise, and echoed in ``X-Request-Id``.

A success of a polled route (health checks, model lists, props, metrics: ``Route.polled``) is logged
at debug level, as llama-server leaves them out of its request log: Vertex AI's health checker and
a metrics scraper would otherwise fill the log (and Cloud Logging's bill) with them. Their failures
(a 503 while the model loads, say) stay at info."""

from __future__ import annotations

import logging
import time
import uuid

from flask import Flask, Response, g, request

log = logging.getLogger("app.access")

REQUEST_ID = "X-Request-Id"
TRACE = "X-Cloud-Trace-Context"


def _request_id() -> str:
    given = request.headers.get(REQUEST_ID, "").strip()
    if given and len(given) <= 128 and given.isprintable():
        return given
    trace = request.headers.get(TRACE, "").split("/", 1)[0].strip()
    if trace and trace.isalnum():
        return trace
    return uuid.uuid4().hex


def install_access_log(app: Flask, quiet_endpoints: frozenset[str] = frozenset()) -> None:
    """``quiet_endpoints``: the Flask endpoints whose successes are logged at debug level."""
    @app.before_request
    def start() -> None:
        g.started = time.perf_counter()
        g.request_id = _request_id()
        g.tokens = None

    @app.after_request
    def finish(response: Response) -> Response:
        request_id = getattr(g, "request_id", None) or _request_id()
        response.headers[REQUEST_ID] = request_id
        started = getattr(g, "started", time.perf_counter())
        method, path, status, tokens = request.method, request.path, response.status_code, getattr(g, "tokens", None)
        level = logging.DEBUG if status < 400 and request.endpoint in quiet_endpoints else logging.INFO
        if not log.isEnabledFor(level):
            return response

        def write() -> None:
            latency = time.perf_counter() - started
            log.log(
                level, "%s %s %s %.3fs%s id=%s", method, path, status, latency,
                f" tokens={tokens}" if tokens is not None else "", request_id,
                extra={"httpRequest": {"requestMethod": method, "requestUrl": path, "status": status,
                                       "latency": f"{latency:.3f}s"},
                       "request_id": request_id, "tokens": tokens},
            )

        response.call_on_close(write)
        return response
