"""The one table that maps errors to ``(HTTP status, error type)``, and the error body it renders.

    ApiError                    raised by handlers for a problem with the request or the server
    ├── InvalidRequestError     400 invalid_request_error: the message names the field
    ├── AuthenticationError     401 authentication_error
    ├── PermissionDeniedError   403 permission_error: the request may not touch that resource
    │   └── FeatureDisabledError  403 feature_disabled: agent mode's routes while it is off (llama-server's)
    ├── NotFoundError           404 not_found_error
    ├── MethodNotAllowedError   405 invalid_request_error: a known path with the wrong method
    ├── PayloadTooLargeError    413 invalid_request_error
    ├── NotSupportedError       501 not_supported_error: a feature that is switched off
    └── UnavailableError        503 unavailable_error
(a predict that finds the queue full is a 429 with Retry-After: ``QueueFullError``)

Engine errors (``app.engine.errors``) are mapped by the same table. JSON responses, per-instance
predict errors and SSE error events are all rendered by :func:`error_body`. The body is
llama-server's: ``{"error": {"code", "message", "type"}}`` plus ``n_prompt_tokens`` and ``n_ctx``
for a context overflow.
"""

from __future__ import annotations

from typing import Any

from app.engine import errors as engine_errors


class ApiError(Exception):
    """An error with a message meant for the client."""


class InvalidRequestError(ApiError):
    pass


class AuthenticationError(ApiError):
    def __init__(self, message: str = "Invalid API Key") -> None:
        super().__init__(message)


class PermissionDeniedError(ApiError):
    pass


class FeatureDisabledError(PermissionDeniedError):
    def __init__(self, message: str = "this feature is disabled") -> None:
        super().__init__(message)


class NotFoundError(ApiError):
    def __init__(self, message: str = "File Not Found") -> None:
        super().__init__(message)


class MethodNotAllowedError(ApiError):
    pass


class PayloadTooLargeError(ApiError):
    pass


class RequestTimeoutError(ApiError):
    pass


class NotSupportedError(ApiError):
    pass


class UnavailableError(ApiError):
    pass


class ServerError(ApiError):
    """The server could not do what was asked (a router's model that failed to load, a child that went away)."""


ERROR_TABLE: dict[type[BaseException], tuple[int, str]] = {
    InvalidRequestError: (400, "invalid_request_error"),
    AuthenticationError: (401, "authentication_error"),
    PermissionDeniedError: (403, "permission_error"),
    FeatureDisabledError: (403, "feature_disabled"),
    NotFoundError: (404, "not_found_error"),
    MethodNotAllowedError: (405, "invalid_request_error"),
    RequestTimeoutError: (408, "invalid_request_error"),
    PayloadTooLargeError: (413, "invalid_request_error"),
    NotSupportedError: (501, "not_supported_error"),
    UnavailableError: (503, "unavailable_error"),
    ServerError: (500, "server_error"),
    engine_errors.ContextExceededError: (400, "exceed_context_size_error"),
    engine_errors.InvalidJobError: (400, "invalid_request_error"),
    engine_errors.UnsupportedError: (501, "not_supported_error"),
    engine_errors.SlotBusyError: (503, "unavailable_error"),
    engine_errors.NotReadyError: (503, "unavailable_error"),
    engine_errors.QueueFullError: (429, "unavailable_error"),
    engine_errors.OverloadedError: (503, "unavailable_error"),
    engine_errors.CancelledError: (500, "server_error"),
    engine_errors.DecodeError: (500, "server_error"),
    engine_errors.EngineError: (500, "server_error"),
}

SERVER_ERROR = (500, "server_error")


def classify(exc: BaseException) -> tuple[int, str]:
    """``(status, type)`` for an exception, resolved through its class's MRO."""
    for cls in type(exc).__mro__:
        if cls in ERROR_TABLE:
            return ERROR_TABLE[cls]
    return SERVER_ERROR


def is_expected(exc: BaseException) -> bool:
    """True when the table knows the exception: it is reported without a traceback."""
    return any(cls in ERROR_TABLE for cls in type(exc).__mro__)


def error_object(exc: BaseException) -> dict[str, Any]:
    status, kind = classify(exc)
    message = str(exc) if is_expected(exc) else f"{type(exc).__name__}: {exc}"
    error: dict[str, Any] = {"code": status, "message": message, "type": kind}
    if isinstance(exc, engine_errors.ContextExceededError):
        error["n_prompt_tokens"] = exc.n_prompt_tokens
        error["n_ctx"] = exc.n_ctx
    return error


def error_headers(exc: BaseException) -> dict[str, str]:
    """Headers an error answer carries: ``Retry-After`` where the error says when to retry."""
    retry_after = getattr(exc, "retry_after", None)
    return {"Retry-After": str(retry_after)} if isinstance(retry_after, int) else {}


def error_body(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """The HTTP status and the wire body ``{"error": {...}}`` for an exception."""
    error = error_object(exc)
    return error["code"], {"error": error}
