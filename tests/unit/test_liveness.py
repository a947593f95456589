"""Liveness (GET /live): alive while the engine waits for work, works, loads or sleeps; not alive once
one step has run over --liveness-seconds (a wedged llama.cpp call) or the engine thread has ended."""

from __future__ import annotations

import time

import pytest

from app.engine import EngineOptions, GenerationRequest
from tests.fakes import FakeBackend, completion_of, encode, running_engine


def test_a_step_that_runs_too_long_is_not_alive() -> None:
    backend = FakeBackend(reply_for=lambda prompt: "a long answer", n_seq=1, n_ctx_seq=256)
    with running_engine(backend) as engine:
        assert engine.stalled(0.2) is None  # waiting for work
        backend.decode_seconds = 0.6  # every decode now takes 0.6 s: a wedged call, for a 0.2 s limit
        job = engine.submit(GenerationRequest(prompt=tuple(encode("hello")), n_predict=2))
        time.sleep(0.4)
        problem = engine.stalled(0.2)
        assert problem is not None and "over --liveness-seconds" in problem
        assert engine.stalled(60) is None  # the same step, under a longer limit
        backend.decode_seconds = 0
        completion_of(job, timeout=10)
        assert engine.stalled(0.2) is None  # between steps again


def test_a_sleeping_engine_is_alive_however_long_it_sleeps() -> None:
    """--sleep-idle-seconds: the engine thread waits for the next job outside any step."""
    backend = FakeBackend(reply_for=lambda prompt: "x", n_seq=1, n_ctx_seq=256)
    with running_engine(backend, EngineOptions(sleep_idle_seconds=0)) as engine:
        deadline = time.monotonic() + 5
        while not engine.is_sleeping and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.is_sleeping
        time.sleep(0.4)
        assert engine.stalled(0.2) is None  # asleep for twice the limit
        completion_of(engine.submit(GenerationRequest(prompt=tuple(encode("hi")), n_predict=1)), timeout=10)
        assert engine.stalled(0.2) is None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death it makes
def test_an_engine_thread_that_ended_is_not_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode that raises what the engine does not catch (a BaseException) ends its thread."""
    backend = FakeBackend(reply_for=lambda prompt: "x", n_seq=1, n_ctx_seq=256)

    def fatal(entries: object) -> None:
        raise SystemExit("the engine thread dies")

    with running_engine(backend) as engine:
        monkeypatch.setattr(backend, "decode", fatal)
        engine.submit(GenerationRequest(prompt=tuple(encode("hello")), n_predict=2))
        deadline = time.monotonic() + 5
        while engine.stalled(60) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.stalled(60) in ("the engine has stopped", "the engine thread has ended")
