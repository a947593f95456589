"""Reranking as llama-server answers it: the Jina form (documents) and the TEI form (texts: a
bare list with "score", "text" with return_text), and a model's rerank template. The fake
embedder scores an input by its number of tokens, so the scores show each prompt's layout."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.config.settings import parse_settings
from app.server.wiring import Application, build_application
from tests.fakes import FakeBackend, encode


def application(rerank_template: str | None = None) -> Application:
    failures: list[BaseException] = []
    built = build_application(parse_settings(["--reranking"], {}), "/models/fake.gguf", None, failures.append,
                              lambda config: FakeBackend(n_seq=config.n_seq, rerank_template=rerank_template))
    assert built.context.engine.wait_ready(10) and not failures
    return built


@pytest.fixture
def plain() -> Iterator[Application]:
    app = application()
    yield app
    app.shutdown()


def rerank(app: Application, **body: Any) -> Any:
    response = app.flask.test_client().post("/rerank", json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.json


def test_the_jina_form(plain: Application) -> None:
    answer = rerank(plain, query="ab", documents=["c", "dddd", "ee"], top_n=2, model="mine")
    assert answer["object"] == "list" and answer["model"] == "mine"
    assert [(r["index"], r["relevance_score"]) for r in answer["results"]] == [(1, 6.0), (2, 4.0)]  # query + doc
    assert answer["usage"]["prompt_tokens"] == 3 + 6 + 4


def test_the_tei_form(plain: Application) -> None:
    answer = rerank(plain, query="ab", texts=["c", "dddd"], return_text=True)
    assert answer == [{"index": 1, "score": 6.0, "text": "dddd"}, {"index": 0, "score": 3.0, "text": "c"}]
    assert "text" not in rerank(plain, query="ab", texts=["c"])[0]


def test_a_models_rerank_template_lays_out_the_prompt() -> None:
    template = "Query: {query}\nDocument: {document}\nRelevant:"
    app = application(template)
    try:
        answer = rerank(app, query="ab", documents=["c"])
        expected = len(encode(template.replace("{query}", "ab").replace("{document}", "c")))
        assert answer["results"][0]["relevance_score"] == float(expected)
    finally:
        app.shutdown()
