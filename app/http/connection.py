"""A request's handler asking the server to close the connection after its response (gunicorn
ignores an application's ``Connection: close``). The flag lives with the thread that serves the
request: the Flask handler sets it, the gunicorn worker takes it once the response is written."""

from __future__ import annotations

import threading

_state = threading.local()


def close_after_response() -> None:
    _state.close = True


def take_close_request() -> bool:
    """Whether the request just served on this thread asked for its connection to be closed (and reset)."""
    asked = bool(getattr(_state, "close", False))
    _state.close = False
    return asked
