"""OpenAI batch rows as predict instances, so one JSONL input file serves OpenAI's Batch API, Model
Garden batch jobs, LiteLLM and this container.

A row is ``{"custom_id", "method", "url", "body"}``: ``url`` picks the route by its path
(``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, any route of the table),
``body`` is that route's request, ``method`` (default ``POST``) must be the route's. Each row is
answered as a line of OpenAI's batch output: ``{"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error"}``; a route's error answer is a response with its status code, and
``error`` is set only when the row itself cannot be sent (no such route, a body that is not an
object).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

ROW_KEYS = ("custom_id", "url", "body")


class BatchRowError(ValueError):
    """A row that cannot be sent to any route; ``code`` is OpenAI's batch error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def is_batch_row(instance: dict[str, Any]) -> bool:
    return all(key in instance for key in ROW_KEYS)


@dataclass(frozen=True)
class BatchRow:
    custom_id: Any
    method: str
    path: str
    body: dict[str, Any]

    @classmethod
    def parse(cls, instance: dict[str, Any]) -> BatchRow:
        url, body, method = instance["url"], instance["body"], instance.get("method", "POST")
        if not isinstance(url, str) or not urlsplit(url).path.startswith("/"):
            raise BatchRowError("invalid_url", f"url must be a route path such as /v1/chat/completions, not {url!r}")
        if not isinstance(body, dict):
            raise BatchRowError("invalid_request", "body must be a JSON object")
        if not isinstance(method, str):
            raise BatchRowError("invalid_method", "method must be a string such as POST")
        return cls(instance["custom_id"], method.upper(), urlsplit(url).path, body)


def _ids() -> tuple[str, str]:
    return "batch_req_" + secrets.token_hex(12), secrets.token_hex(16)


def batch_answer(custom_id: Any, status: int, body: Any) -> dict[str, Any]:
    """The route's answer (a success or its error body) as an OpenAI batch output line."""
    line_id, request_id = _ids()
    return {"id": line_id, "custom_id": custom_id,
            "response": {"status_code": status, "request_id": request_id, "body": body}, "error": None}


def batch_failure(custom_id: Any, error: BatchRowError) -> dict[str, Any]:
    """A row that was not sent: OpenAI's batch output line with ``error`` and no response."""
    line_id, _ = _ids()
    return {"id": line_id, "custom_id": custom_id, "response": None,
            "error": {"code": error.code, "message": str(error)}}
