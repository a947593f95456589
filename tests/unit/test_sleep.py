"""Idle sleep frees the model; what the server built on the first one must not outlive it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from app.config.settings import parse_settings
from app.engine.backend import Backend
from app.server.wiring import build_application
from tests.fakes import FakeBackend, FakeVocabulary


class FreedWithItsModel(FakeVocabulary):
    """A vocabulary that, like llama.cpp's, must not be used once its model is freed."""

    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend

    def apply_builtin_template(self, template: str | None, messages: Sequence[tuple[str, str]],
                               add_assistant: bool) -> str:
        assert not self.backend.closed, "the vocabulary of a freed model was used"
        return super().apply_builtin_template(template, messages, add_assistant)


def test_built_in_templates_render_with_the_model_loaded_now() -> None:
    loads: list[FakeBackend] = []

    def make(config: Any) -> Backend:
        backend = FakeBackend(n_seq=config.n_seq)
        backend.vocab = FreedWithItsModel(backend)
        loads.append(backend)
        return backend

    settings = parse_settings(["-np", "1", "--no-jinja", "--sleep-idle-seconds", "1"], {})
    app = build_application(settings, "/models/fake.gguf", None, lambda exc: None, make)
    try:
        assert app.context.engine.wait_ready(10)
        client = app.flask.test_client()
        body = {"messages": [{"role": "user", "content": "Hi"}]}
        assert client.post("/apply-template", json=body).status_code == 200
        deadline = time.monotonic() + 10
        while not app.context.engine.is_sleeping and time.monotonic() < deadline:
            time.sleep(0.05)
        assert app.context.engine.is_sleeping and loads[0].closed
        again = client.post("/apply-template", json=body)
        assert again.status_code == 200, again.get_data(as_text=True)
        assert len(loads) == 2  # woken: the new model's vocabulary rendered it
    finally:
        app.shutdown()
