"""GET /openapi.json, and a bounded schemathesis fuzz of every operation against the live
container: no 5xx, every response conforming to the document."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Ok

from app.handlers.routes import ROUTES
from tests.integration.conftest import Server, start


@pytest.fixture(scope="module")
def fuzz_server(server_dir: Path) -> Iterator[Server]:
    saves = server_dir / "fuzz-slots"
    saves.mkdir(exist_ok=True)
    # -n 8 for requests that set no budget, --predict-deadline 1 ends the others (a request's own
    # n_predict wins over -n, as in llama-server), so random n_predict values stay cheap
    server = start(server_dir, ["-np", "2", "-c", "2048", "-n", "8", "--predict-deadline", "1", "--metrics",
                                "--props",
                                "--slot-save-path", str(saves)], {"AIP_MODE": "PREDICTION"})
    yield server
    assert server.stop() == 0, server.log()


def test_the_document_lists_every_route(vertex_server: Server) -> None:
    document = requests.get(vertex_server.url("/openapi.json"), timeout=10).json()
    assert document["openapi"] == "3.1.0"
    paths = document["paths"]
    for spec in ROUTES:
        path = spec.path.replace(":id_slot", "{id_slot}")
        assert spec.method.lower() in paths[path], spec
    assert "post" in paths["/predict"]
    chat = paths["/v1/chat/completions"]["post"]
    schema_ref = chat["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    chat_schema = document["components"]["schemas"][schema_ref.rsplit("/", 1)[1]]
    assert "messages" in chat_schema["required"]
    assert "text/event-stream" in chat["responses"]["200"]["content"]
    assert chat["responses"]["default"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"}


def test_fuzz_every_operation(fuzz_server: Server) -> None:
    """Bounded (a dozen examples an operation, derandomized), so it is the same run every time."""
    api = schemathesis.openapi.from_url(fuzz_server.url("/openapi.json"))
    failures: list[str] = []
    operations = 0
    for result in api.get_all_operations():
        assert isinstance(result, Ok), result  # every operation of the document loads
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(max_examples=12, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def run(case: Any) -> None:
            response = case.call(base_url=fuzz_server.base, timeout=120)
            if response.status_code >= 500 and response.status_code != 501:  # 501: a feature this server has off
                failures.append(f"{case.method} {case.path} {case.body!r:.300} -> {response.status_code} "
                                f"{response.text[:300]}")
                return
            try:
                case.validate_response(response, checks=(schemathesis.checks.response_schema_conformance,))
            except Exception as exc:  # collect every non-conforming answer, not just the first
                failures.append(f"{case.method} {case.path}: {exc!s:.300}")

        run()
    assert operations >= len(ROUTES)
    assert failures == [], "\n".join(failures)
    assert requests.get(fuzz_server.url("/health"), timeout=10).status_code == 200
