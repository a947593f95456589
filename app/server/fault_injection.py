"""Test-only crashes through the backend seam, so the tests can kill a real server's worker the way
a bad llama.cpp build would (the server reads ``CRASH_VARIABLE`` once, when it builds the app).

    VERTEX_LLAMA_TEST_CRASH=load:SIGILL      the worker kills itself with SIGILL while loading
    VERTEX_LLAMA_TEST_CRASH=load:SIGILL:2    ... after 2 s of loading (while it answers 503s)
    VERTEX_LLAMA_TEST_CRASH=decode:SIGSEGV   ... with SIGSEGV at its first decode after loading

Unset (always, outside the tests), the backend factory is returned unchanged.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the master reads a crash spec without importing the engine
    from app.engine.backend import Backend, BatchEntry

CRASH_VARIABLE = "VERTEX_LLAMA_TEST_CRASH"
MOMENTS = ("load", "decode")


class CrashSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Crash:
    moment: str
    signum: signal.Signals
    delay: float


def parse_crash(spec: str) -> Crash:
    moment, _, rest = spec.partition(":")
    name, _, delay = rest.partition(":")
    if moment not in MOMENTS:
        raise CrashSpecError(f"{CRASH_VARIABLE}: the moment must be one of {', '.join(MOMENTS)}, not {moment!r}")
    try:
        return Crash(moment, signal.Signals[name], float(delay or 0))
    except (KeyError, ValueError):
        raise CrashSpecError(f"{CRASH_VARIABLE}: expected <moment>:<SIGNAL>[:<seconds>], not {spec!r}") from None


def die(signum: signal.Signals) -> None:
    """The signal to this thread, as a real illegal instruction or bad access would come: the crash
    report's current thread is then the one that crashed (a process-wide kill may land on any)."""
    signal.pthread_kill(threading.get_ident(), signum)


class CrashingBackend:
    """The real backend, except that its first decode kills the process."""

    def __init__(self, inner: Backend, signum: signal.Signals) -> None:
        self._inner = inner
        self._signum = signum

    def decode(self, batch: Sequence[BatchEntry]) -> None:
        die(self._signum)
        self._inner.decode(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def with_crash(make_backend: Callable[[Any], Backend], crash: Crash | None) -> Callable[[Any], Backend]:
    if crash is None:
        return make_backend

    def make(config: Any) -> Backend:
        if crash.moment == "load":
            time.sleep(crash.delay)
            die(crash.signum)
        return CrashingBackend(make_backend(config), crash.signum)

    return make
