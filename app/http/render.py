"""ApiReply -> Flask response: JSON bodies, plain text, and server-sent event streams."""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any

from flask import Response

from app.protocol.api import ApiReply, SseEvent
from app.protocol.errors import error_object, is_expected

log = logging.getLogger(__name__)

JSON_TYPE = "application/json; charset=utf-8"


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sse_line(event: SseEvent) -> str:
    data = event.data if isinstance(event.data, str) else dumps(event.data)
    head = f"event: {event.event}\n" if event.event else ""
    return f"{head}data: {data}\n\n"


def default_stream_error(error: dict[str, Any]) -> SseEvent:
    return SseEvent({"error": error})


PING = ":\n\n"  # an SSE comment: clients ignore it, idle-connection timeouts see traffic
IN_STEP_EVENTS = 16  # a stream's first events, pulled in step with their writing (with_pings): a first token
# gives at most a handful (Responses: 5, with the ones before it)


class DaemonThreads:
    """Daemon threads kept for the next task once theirs ends: a stream's event puller starts on one already
    running (a new thread per stream delayed its first chunk by ~2 ms here, waiting for the new thread's
    start under the GIL). Never fewer threads than tasks running; idle ones wait for work, and being daemons
    they never hold up the process's exit."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    @property
    def idle(self) -> int:
        """Threads waiting for a task."""
        return self._idle

    def run(self, task: Callable[[], None]) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._tasks.put(task)
        if spawn:
            threading.Thread(target=self._work, name=self._name, daemon=True).start()

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            try:
                task()
            except BaseException:  # the task's own errors are its own; the thread goes on serving
                log.exception("a %s task failed", self._name)
            with self._lock:
                self._idle += 1


_PULLERS = DaemonThreads("sse-events")


def with_pings(events: Iterator[SseEvent], seconds: float) -> Iterator[SseEvent | None]:
    """``events``, with a None (a ping) whenever none has come for ``seconds``. The events are
    pulled on a thread of their own (``_PULLERS``), which is done with them when they end (or at the
    first pull after this iterator is closed); their errors are raised here. For the first
    ``IN_STEP_EVENTS`` events the puller asks for the next one only once the last has been written (as
    the writer would pull them itself without pings), so that a stream's source hears its reader has
    caught up only once the first token's events are out (app/engine/first_chunks.py); later ones are
    pulled while the writer writes (a hand-off for each costs ~5 % of the tokens/s at 64 streams)."""
    arrived: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
    written = threading.Semaphore(0)
    closed = threading.Event()

    def pull() -> None:
        try:
            for number, event in enumerate(events):
                arrived.put(("event", event))
                if number < IN_STEP_EVENTS:
                    written.acquire()
                if closed.is_set():
                    break
            arrived.put(("end", None))
        except BaseException as exc:  # handed to the reader
            arrived.put(("error", exc))
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    _PULLERS.run(pull)
    delivered = 0
    try:
        while True:
            try:
                kind, value = arrived.get(timeout=seconds)
            except queue.Empty:
                yield None
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
            if delivered < IN_STEP_EVENTS:  # past them the puller no longer waits
                delivered += 1
                written.release()
    finally:
        closed.set()
        written.release()


def sse_body(events: Iterator[SseEvent], on_error: Callable[[dict[str, Any]], SseEvent] | None = None,
             ping_seconds: float = 0.0) -> Generator[str, None, None]:
    """Write events; an error once the stream has started is sent as one error event, then the
    stream ends (headers cannot change any more). With ``ping_seconds``, a comment whenever no
    event has come for that long."""
    source: Iterator[SseEvent | None] = with_pings(events, ping_seconds) if ping_seconds > 0 else events
    try:
        for event in source:
            yield PING if event is None else sse_line(event)
    except Exception as exc:
        if not is_expected(exc):
            log.exception("error in the middle of a stream")
        yield sse_line((on_error or default_stream_error)(error_object(exc)))
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def to_response(reply: ApiReply) -> Response:
    if reply.raw_stream is not None:
        response = Response(reply.raw_stream, status=reply.status,
                            content_type=reply.content_type or "text/event-stream")
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Accel-Buffering"] = "no"
    elif reply.stream is not None:
        response = Response(sse_body(reply.stream, reply.stream_error, reply.ping_seconds), status=reply.status,
                            mimetype="text/event-stream")
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Accel-Buffering"] = "no"
    elif reply.text is not None:
        response = Response(reply.text, status=reply.status,
                            content_type=reply.content_type or "text/plain; charset=utf-8")
    else:
        response = Response(dumps(reply.body), status=reply.status, content_type=reply.content_type or JSON_TYPE)
    for name, value in reply.headers.items():
        response.headers[name] = value
    return response
