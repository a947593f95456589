"""What runs before every route, in llama-server's order: CORS preflight, the loading gate (and
the shutdown gate), the API key check."""

from __future__ import annotations

from collections.abc import Callable, Collection

from flask import Flask, Response, request

from app.http.cors import DEFAULT_CORS, CorsPolicy
from app.http.render import to_response
from app.protocol.api import ApiReply
from app.protocol.errors import AuthenticationError, UnavailableError
from app.protocol.keys import key_is_valid, presented_key


def _presented_key() -> str:
    return presented_key(request.headers.get("Authorization", ""), request.headers.get("X-Api-Key", ""))


def install_middleware(
    app: Flask,
    is_ready: Callable[[], bool],
    api_keys: Collection[str],
    public_paths: Collection[str],
    is_draining: Callable[[], bool] = lambda: False,
    cors: CorsPolicy = DEFAULT_CORS,
    always_open: Collection[str] = (),
) -> None:
    """``public_paths`` need no API key; ``always_open`` paths (the static UI) need none and are
    answered while the model loads too."""

    @app.before_request
    def gate() -> Response | None:
        if request.method == "OPTIONS":
            response = Response(status=200, content_type="text/html")
            response.headers.update(cors.preflight_headers())
            return response
        if is_draining():
            return to_response(ApiReply.error(UnavailableError("the server is shutting down")))
        if request.path in always_open:
            return None
        if not is_ready():
            return to_response(ApiReply.error(UnavailableError("Loading model")))
        if api_keys and request.path not in public_paths and not key_is_valid(_presented_key(), api_keys):
            return to_response(ApiReply.error(AuthenticationError()))
        return None

    @app.after_request
    def allow_origin(response: Response) -> Response:
        allowed = cors.allowed_origin(request.headers.get("Origin"))
        if allowed is not None:
            response.headers["Access-Control-Allow-Origin"] = allowed
            if allowed != "*":
                response.headers["Vary"] = "Origin"
        return response
