"""Context shift (--context-shift, --keep, n_keep, n_discard) on the fake backend: a generation that
fills its slot drops tokens after the kept ones and goes on; without it, it ends truncated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.engine import Completion, Engine, EngineOptions, GenerationRequest, SamplingParams
from tests.fakes import FakeBackend, completion_of, encode, running_engine

PROMPT = "keep these words, then question>"


def finish(engine: Engine, **fields: object) -> Completion:
    request = GenerationRequest(prompt=tuple(encode(PROMPT)), sampling=SamplingParams(ignore_eos=True),
                                **fields)  # type: ignore[arg-type]
    job = engine.submit(request)
    return completion_of(job)


def running(backend: FakeBackend, shift: bool) -> Iterator[Engine]:
    with running_engine(backend, EngineOptions(context_shift=shift)) as engine:
        yield engine


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend(reply_for=lambda prompt: "ok", n_seq=1, n_ctx_seq=64, n_batch=64)


def test_without_context_shift_a_generation_ends_at_the_context(backend: FakeBackend) -> None:
    for engine in running(backend, False):
        result = finish(engine, n_predict=200)
        assert result.truncated and len(result.tokens) < 64 and not backend.shifts


def test_a_shift_keeps_n_keep_tokens_and_drops_n_discard(backend: FakeBackend) -> None:
    for engine in running(backend, True):
        result = finish(engine, n_predict=200, n_keep=5, n_discard=20)
        assert len(result.tokens) == 200 and result.truncated
        assert backend.shifts and all(shift == (0, 5, 20) for shift in backend.shifts)
        assert backend.kv[0][:5] == encode(PROMPT)[:5]  # the kept tokens stay first in the cells


def test_the_default_drops_half_of_the_rest_and_minus_one_keeps_the_prompt(backend: FakeBackend) -> None:
    for engine in running(backend, True):
        finish(engine, n_predict=100)
        assert backend.shifts[0] == (0, 0, 63 // 2)  # slot 0, nothing kept, half of 63 cells dropped
        backend.shifts.clear()
        finish(engine, n_predict=100, n_keep=-1)
        assert backend.shifts[0][1] == len(encode(PROMPT))
        assert backend.kv[0][:len(encode(PROMPT))] == encode(PROMPT)
