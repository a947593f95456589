"""The whole application in process, on the fake backend (tests/fakes.py): the real wiring, routes,
handlers and engine, with a Flask test client (fixtures ``application`` and ``client``, shared by
tests/unit through its conftest)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.config.settings import parse_settings
from app.engine.backend import Backend
from app.server.wiring import Application, build_application
from tests.fakes import MARK, FakeBackend, FakeVocabulary, encode

N_CTX_SEQ = 256
JAPANESE = "日本語の文章です"  # 3 bytes a character; the fake vocabulary has a token a byte
PROMPT = "Hi>"  # the fake model answers JAPANESE after the last ">"
POISON = "~"  # a prompt holding it fails its first decode
TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"


class FimVocabulary(FakeVocabulary):
    """FIM tokens for /infill; FIM_MID, which ends an infill prompt, is the fake model's ">" (it
    answers after it)."""

    def special_tokens(self) -> dict[str, int]:
        return {"fim_pre": 3, "fim_suf": 4, "fim_mid": MARK}


def make_application(*args: str, reply: str = JAPANESE, made: list[FakeBackend] | None = None) -> Application:
    """The app on the fake backend (answering ``reply``), loaded; ``args`` are extra flags; ``made`` gets the
    backend (to slow its decodes, say)."""
    def make(config: Any) -> Backend:
        backend = FakeBackend(reply_for=lambda prompt: reply, n_seq=config.n_seq,
                              n_ctx_seq=N_CTX_SEQ, n_batch=512, vocab=FimVocabulary(), poison=encode(POISON)[0])
        if made is not None:
            made.append(backend)
        return backend

    failures: list[BaseException] = []
    settings = parse_settings(["-np", "2", "-b", "512", "--chat-template", TEMPLATE, *args], {})
    built = build_application(settings, "/models/fake.gguf", None, failures.append, make)
    assert built.context.engine.wait_ready(30) and not failures
    return built


@pytest.fixture(scope="module")
def application() -> Iterator[Application]:
    built = make_application()
    yield built
    built.shutdown()


@pytest.fixture
def client(application: Application) -> FlaskClient:
    return application.flask.test_client()
