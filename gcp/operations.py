"""Waiting on Vertex AI's long-running operations (a deployment) for as long as they may take, and no
longer: api-core's bare ``.result()`` gives up after 900 s, while a multi-GB model on a newly
provisioned GPU machine may take far more; and a deployment that cannot finish must not hang the
tool forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

# Vertex provisions the machine before the container's deployment timeout starts counting.
PROVISIONING_MARGIN_S = 900
POLL_SECONDS = 15.0
# Read at call time, so that tests can run a deployment of many simulated minutes at once.
CLOCK: Callable[[], float] = time.monotonic
SLEEP: Callable[[float], None] = time.sleep


def seconds(duration: Any) -> float:
    """A message's Duration field in seconds: proto-plus hands it over as a ``timedelta`` (protobuf's
    stubs type it as the Duration message)."""
    return float(duration.total_seconds())


def instant(timestamp: Any) -> float:
    """A message's Timestamp field as POSIX seconds (proto-plus: a ``datetime``)."""
    return float(timestamp.timestamp())


class Operation(Protocol):
    def done(self) -> bool: ...  # api-core refreshes the operation from the server here

    def result(self) -> Any: ...


class OperationTimeoutError(Exception):
    """The operation was still running when the wait ended (it goes on at Vertex AI)."""


def deployment_wait_seconds(deployment_timeout_s: int) -> float:
    return deployment_timeout_s + PROVISIONING_MARGIN_S


def wait_for(operation: Operation, timeout_s: float, on_poll: Callable[[], None] | None = None,
             poll_s: float = POLL_SECONDS) -> Any:
    """The operation's result (its error raised), polling every ``poll_s`` until ``timeout_s``."""
    deadline = CLOCK() + timeout_s
    while not operation.done():
        if CLOCK() >= deadline:
            raise OperationTimeoutError(f"still running after {timeout_s:.0f} s")
        if on_poll is not None:
            on_poll()
        SLEEP(poll_s)
    return operation.result()
