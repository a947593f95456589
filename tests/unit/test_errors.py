"""One error table for every error body."""

from __future__ import annotations

import pytest

from app.engine import (
    CancelledError,
    ContextExceededError,
    DecodeError,
    InvalidJobError,
    NotReadyError,
    OverloadedError,
)
from app.protocol.errors import (
    AuthenticationError,
    InvalidRequestError,
    MethodNotAllowedError,
    NotFoundError,
    NotSupportedError,
    PayloadTooLargeError,
    UnavailableError,
    classify,
    error_body,
)


@pytest.mark.parametrize(
    ("error", "status", "kind"),
    [
        (InvalidRequestError("x"), 400, "invalid_request_error"),
        (AuthenticationError(), 401, "authentication_error"),
        (NotFoundError(), 404, "not_found_error"),
        (MethodNotAllowedError("x"), 405, "invalid_request_error"),
        (PayloadTooLargeError("x"), 413, "invalid_request_error"),
        (NotSupportedError("x"), 501, "not_supported_error"),
        (UnavailableError("x"), 503, "unavailable_error"),
        (ContextExceededError(10, 5), 400, "exceed_context_size_error"),
        (InvalidJobError("x"), 400, "invalid_request_error"),
        (NotReadyError(), 503, "unavailable_error"),
        (OverloadedError("x"), 503, "unavailable_error"),
        (DecodeError(-3), 500, "server_error"),
        (CancelledError(), 500, "server_error"),
        (RuntimeError("boom"), 500, "server_error"),
    ],
)
def test_table(error: BaseException, status: int, kind: str) -> None:
    assert classify(error) == (status, kind)
    code, body = error_body(error)
    assert code == status
    assert body["error"]["code"] == status
    assert body["error"]["type"] == kind
    assert set(body["error"]) >= {"code", "message", "type"}


def test_context_overflow_carries_the_counts() -> None:
    _, body = error_body(ContextExceededError(300, 256))
    assert body["error"]["n_prompt_tokens"] == 300
    assert body["error"]["n_ctx"] == 256
    assert "300 tokens" in body["error"]["message"]


def test_an_unexpected_error_names_its_class() -> None:
    _, body = error_body(KeyError("missing"))
    assert body["error"]["message"].startswith("KeyError")


def test_canonical_messages() -> None:
    assert error_body(AuthenticationError())[1]["error"]["message"] == "Invalid API Key"
    assert error_body(NotFoundError())[1]["error"]["message"] == "File Not Found"
    assert error_body(NotReadyError())[1]["error"]["message"] == "Loading model"
