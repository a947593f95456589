"""A stream's first token is written before the next decode where a decode takes every core
(app/engine/first_chunks.py): the engine waits for the stream's reader, and the reader says when it
has caught up, through the handlers and the SSE writer."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from app.config.settings import parse_settings
from app.engine import GenerationRequest, first_chunks
from app.engine.backend import Backend
from app.engine.slots import Job
from app.engine.types import Completion, TokenChunk
from app.server.wiring import build_application
from tests.fakes import FakeBackend, encode, running_engine

LONG_WAIT = 30.0  # the bound in these tests: a reader that never caught up would show as a timeout


def reader_pauses(backend: FakeBackend, stream: bool, pause: float = 0.2) -> tuple[int, int]:
    """Decodes done when the reader took the job's first chunk, and when it had caught up after
    pausing ``pause`` seconds (as a reader turning the chunk into the route's own would)."""
    with running_engine(backend) as engine:
        job = engine.submit(GenerationRequest(prompt=tuple(encode("Hi")), stream=stream))
        while True:
            _, event = job.sink.get(timeout=10)
            if isinstance(event, TokenChunk):
                break
        at_first = len(backend.batches)
        time.sleep(pause)
        after_pause = len(backend.batches)
        job.reader_caught_up()
        while not isinstance(job.sink.get(timeout=10)[1], Completion):
            pass
    return at_first, after_pause


@pytest.fixture
def long_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(first_chunks, "WAIT_SECONDS", LONG_WAIT)


@pytest.mark.usefixtures("long_wait")
def test_the_next_decode_waits_for_the_reader_of_a_first_token_where_decoding_fills_the_cpu() -> None:
    at_first, after_pause = reader_pauses(FakeBackend(decode_fills_cpu=True, decode_seconds=0.01), stream=True)
    assert after_pause == at_first  # nothing decoded while the reader had not caught up


@pytest.mark.usefixtures("long_wait")
@pytest.mark.parametrize(("fills_cpu", "stream"), [(False, True), (True, False)])
def test_no_wait_on_a_gpu_or_for_a_whole_answer(fills_cpu: bool, stream: bool) -> None:
    at_first, after_pause = reader_pauses(FakeBackend(decode_fills_cpu=fills_cpu, decode_seconds=0.01),
                                         stream=stream)
    assert after_pause > at_first  # the engine went on decoding meanwhile


def test_a_reader_that_never_catches_up_holds_the_decode_only_for_the_bound() -> None:
    def answer(fills_cpu: bool) -> str:
        with running_engine(FakeBackend(decode_fills_cpu=fills_cpu)) as engine:
            job = engine.submit(GenerationRequest(prompt=tuple(encode("Hi")), stream=True))
            while not isinstance(event := job.sink.get(timeout=10)[1], Completion):
                pass
        return event.text

    assert answer(True) == answer(False) != ""


def test_only_the_first_token_is_paced(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[Job] = []
    original = Job.wait_for_reader

    def recorded(job: Job, seconds: float) -> None:
        waits.append(job)
        original(job, seconds)

    monkeypatch.setattr(Job, "wait_for_reader", recorded)
    backend = FakeBackend(decode_fills_cpu=True)
    with running_engine(backend) as engine:
        job = engine.submit(GenerationRequest(prompt=tuple(encode("Hi")), stream=True))
        while not isinstance(job.sink.get(timeout=10)[1], Completion):
            job.reader_caught_up()
    assert waits == [job]


def test_streams_through_http_catch_up_so_the_engine_never_waits_out_the_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every streaming route's reader says it has caught up (the handlers' event loop, behind the SSE
    writer's puller): with a bound of 30 s, each wait ends because the reader caught up."""
    monkeypatch.setattr(first_chunks, "WAIT_SECONDS", LONG_WAIT)
    outcomes: list[bool] = []
    original = Job.wait_for_reader

    def recorded(job: Job, seconds: float) -> None:
        started = time.monotonic()
        original(job, seconds)
        outcomes.append(time.monotonic() - started < LONG_WAIT / 2)

    monkeypatch.setattr(Job, "wait_for_reader", recorded)

    def make(config: Any) -> Backend:
        return FakeBackend(n_seq=config.n_seq, decode_fills_cpu=True)

    failures: list[BaseException] = []
    settings = parse_settings(["-np", "2", "--chat-template", "chatml"], {})
    built = build_application(settings, "/models/fake.gguf", None, failures.append, make)
    try:
        assert built.context.engine.wait_ready(30) and not failures
        client = built.flask.test_client()
        bodies: list[tuple[str, dict[str, Any]]] = [
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "stream": True}),
            ("/completion", {"prompt": "Hi", "stream": True, "sse_ping_interval": 0}),
            ("/v1/completions", {"prompt": "Hi", "stream": True}),
            ("/v1/messages", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 20, "stream": True}),
            ("/v1/responses", {"input": "Hi", "stream": True}),
        ]
        for path, body in bodies:
            reply = client.post(path, data=json.dumps(body), content_type="application/json")
            assert reply.status_code == 200 and "data: " in reply.get_data(as_text=True), path
    finally:
        built.shutdown()
    assert len(outcomes) == 5 and all(outcomes), outcomes


def test_a_job_whose_first_token_is_its_last_is_not_waited_for(long_wait: None) -> None:
    """n_predict 1: the first token ends the job, and the next job's decodes do not wait for its reader
    (which never says it caught up here)."""
    backend = FakeBackend(decode_fills_cpu=True)
    with running_engine(backend) as engine:
        job = engine.submit(GenerationRequest(prompt=tuple(encode("Hi")), stream=True, n_predict=1))
        while not isinstance(job.sink.get(timeout=10)[1], Completion):
            pass
        follow = engine.submit(GenerationRequest(prompt=tuple(encode("Yo")), stream=True, n_predict=3))
        _, first = follow.sink.get(timeout=10)
        follow.reader_caught_up()
        while not isinstance(follow.sink.get(timeout=LONG_WAIT / 2)[1], Completion):
            follow.reader_caught_up()
    assert isinstance(first, TokenChunk)
