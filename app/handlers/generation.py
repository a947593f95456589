"""Running engine jobs from a handler: submit, wait (watching for a client that went away), stream.

Several jobs of one request (several prompts) share one event queue, so they are submitted
together, decoded in the same steps, and read as they come.
"""

from __future__ import annotations

import math
import queue
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

from app.engine import (
    CancelledError,
    Completion,
    Engine,
    EngineError,
    GenerationRequest,
    Job,
    JobEvent,
)
from app.protocol.api import IDLE, ApiReply, Heartbeat, Idle, SseEvent

POLL_SECONDS = 0.1
T = TypeVar("T")


def next_event(sink: queue.SimpleQueue[tuple[int, Any]], should_stop: Callable[[], bool],
               idle_at: float = math.inf) -> tuple[int, Any] | Idle:
    """The next ``(index, event)`` from a job's queue; IDLE if none has come by the monotonic time ``idle_at``;
    CancelledError once the client has gone."""
    while True:
        try:
            return sink.get(timeout=max(min(POLL_SECONDS, idle_at - time.monotonic()), 0.0))
        except queue.Empty:
            if should_stop():
                raise CancelledError("the client disconnected") from None
            if time.monotonic() >= idle_at:
                return IDLE


def wait_for(outcome: Future[T], should_stop: Callable[[], bool]) -> T:
    """A one-shot engine result (its engine error raised); CancelledError once the client has gone."""
    while True:
        try:
            return outcome.result(timeout=POLL_SECONDS)
        except FutureTimeout:
            if should_stop():
                raise CancelledError("the client disconnected") from None


class JobGroup:
    """The jobs of one request. Cancelling the group frees every slot it holds."""

    def __init__(self, engine: Engine, requests: Sequence[GenerationRequest], copies: int = 1) -> None:
        """Submit every request; with ``copies`` > 1, each prompt gets that many completions, and
        the events of prompt ``i``'s copy ``k`` carry the index ``i * copies + k``."""
        self._sink: queue.SimpleQueue[tuple[int, JobEvent | EngineError]] = queue.SimpleQueue()
        self.jobs: list[Job] = []
        self.size = len(requests) * copies
        try:
            for number, request in enumerate(requests):
                self.jobs.append(engine.submit(request, self._sink, number * copies, copies))
        except BaseException:
            self.cancel()
            raise

    def cancel(self) -> None:
        for job in self.jobs:
            job.cancel()

    def events(self, should_stop: Callable[[], bool],
               heartbeat: Heartbeat | None = None) -> Generator[tuple[int, JobEvent] | Idle, None, None]:
        """Events of every job as they arrive; after the first (before it no answer has started: see
        started_stream), IDLE whenever the ``heartbeat``'s stream has written nothing for its interval. Raises
        the first engine error (and cancels the rest). ``should_stop`` is asked every POLL_SECONDS while events
        flow too: a job whose tokens never stop coming must still end when its client has gone (or its gRPC
        deadline has passed)."""
        remaining = self.size
        asked = time.monotonic()
        started = False
        try:
            while remaining:
                idle_at = heartbeat.due_at() if heartbeat is not None and started else math.inf
                if self._sink.empty():  # every event so far handed on: the engine may decode (first_chunks.py)
                    self._caught_up()
                # IDLE when events came but none was written (a call held back), or none came
                item = IDLE if time.monotonic() >= idle_at else next_event(self._sink, should_stop, idle_at)
                if time.monotonic() - asked >= POLL_SECONDS:
                    asked = time.monotonic()
                    if should_stop():
                        raise CancelledError("the client disconnected")
                if isinstance(item, Idle):
                    assert heartbeat is not None
                    heartbeat.beat()
                    yield item
                    continue
                index, event = item
                if isinstance(event, EngineError):
                    raise event
                if isinstance(event, Completion):
                    remaining -= 1
                if not started and heartbeat is not None:
                    heartbeat.beat()  # the answer starts: its silence counts from here, not from the prompt's
                started = True
                yield index, event
        finally:
            self._caught_up()
            if remaining:
                self.cancel()

    def _caught_up(self) -> None:
        for job in self.jobs:
            for member in job.family:
                member.reader_caught_up()

    def results(self, should_stop: Callable[[], bool]) -> list[Completion]:
        finals: dict[int, Completion] = {}
        for item in self.events(should_stop):
            if not isinstance(item, Idle) and isinstance(item[1], Completion):
                finals[item[0]] = item[1]
        return [finals[index] for index in range(self.size)]


@dataclass(frozen=True)
class Streamed:
    index: int
    event: JobEvent


def stream_reply(
    group: JobGroup,
    should_stop: Callable[[], bool],
    render: Callable[[Iterator[Streamed | Idle]], Iterator[SseEvent | Idle]],
    stream_error: Callable[[dict[str, Any]], SseEvent] | None = None,
    *,
    ping_seconds: float,
) -> ApiReply:
    """The reply of every streaming route. The jobs are submitted (the group) and their first event
    has arrived before the reply exists, so that what fails early (a prompt over the context, the
    first decode) is a plain HTTP error with its status, never a 200 and an error event. ``render``
    passes each IDLE on as it is (a comment after ``ping_seconds`` without a write: see :func:`ping_interval`);
    every route names its interval (no default: ``/v1/completions`` once had none, and never pinged)."""
    heartbeat = Heartbeat(ping_seconds)
    return ApiReply(stream=render(started_stream(group, should_stop, heartbeat)), stream_error=stream_error,
                    heartbeat=heartbeat)


def ping_interval(default: int, requested: int | None) -> float:
    """Seconds of silence after which a stream sends an SSE comment: the request's
    ``sse_ping_interval``, else ``--sse-ping-interval``; 0 or less: never."""
    seconds = default if requested is None else requested
    return float(max(seconds, 0))


def started_stream(group: JobGroup, should_stop: Callable[[], bool],
                   heartbeat: Heartbeat | None = None) -> Iterator[Streamed | Idle]:
    """Wait for the first event before answering, so that an early failure (a prompt over the
    context, a failed decode) is a normal HTTP error with its real status; then stream the rest, with
    the ``heartbeat``'s IDLEs."""
    events = group.events(should_stop, heartbeat)
    try:
        first = next(events)
    except StopIteration:
        return iter(())
    assert not isinstance(first, Idle)  # IDLE comes only after an event

    def stream() -> Iterator[Streamed | Idle]:
        try:
            yield Streamed(*first)
            for item in events:
                yield item if isinstance(item, Idle) else Streamed(*item)
        finally:
            events.close()
            group.cancel()

    return stream()
