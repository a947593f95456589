"""The Flask layer with fake routes: middleware order, error bodies, SSE rendering."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from flask.testing import FlaskClient

from app.http import CorsPolicy, create_app
from app.http.flask_app import flask_rule
from app.protocol.api import ApiReply, ApiRequest, InvalidRequestError, Route, SseEvent, guard


def stream_then_fail(request: ApiRequest) -> ApiReply:
    def events() -> Iterator[SseEvent]:
        yield SseEvent({"n": 1})
        raise InvalidRequestError("went wrong mid-stream")

    return ApiReply(stream=events())


def echo(request: ApiRequest) -> ApiReply:
    return ApiReply(body={"body": request.json(), "params": dict(request.params),
                          "path_params": dict(request.path_params)})


def crash(request: ApiRequest) -> ApiReply:
    raise ZeroDivisionError("oops")


ROUTES = [
    Route("GET", "/health", "get_health", guard(lambda r: ApiReply(body={"status": "ok"})), public=True),
    Route("POST", "/echo", "echo", guard(echo)),
    Route("POST", "/items/:item_id", "items", guard(echo)),
    Route("POST", "/stream", "stream", guard(stream_then_fail)),
    Route("POST", "/crash", "crash", guard(crash)),
]


def client(ready: bool = True, keys: tuple[str, ...] = (), prefix: str = "") -> FlaskClient:
    return create_app(ROUTES, lambda: ready, keys, prefix).test_client()


def test_flask_rule() -> None:
    assert flask_rule("/slots/:id_slot") == "/slots/<id_slot>"
    assert flask_rule("/v1/chat/completions") == "/v1/chat/completions"


def test_a_route_gets_body_query_and_path_parameters() -> None:
    response = client().post("/items/7?action=save", json={"a": 1})
    assert response.status_code == 200
    assert response.get_json() == {"body": {"a": 1}, "params": {"action": "save"}, "path_params": {"item_id": "7"}}


def test_unknown_route_is_json_404_and_wrong_method_json_405() -> None:
    missing = client().get("/nothing")
    assert missing.status_code == 404
    assert missing.get_json() == {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
    wrong = client().get("/echo")
    assert wrong.status_code == 405
    assert wrong.get_json()["error"]["code"] == 405
    assert "POST" in wrong.get_json()["error"]["message"]
    assert wrong.headers["Allow"] == "POST"


def test_loading_gate_answers_503_except_preflight() -> None:
    loading = client(ready=False)
    response = loading.get("/health")
    assert response.status_code == 503
    assert response.get_json() == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
    assert loading.post("/echo", json={}).status_code == 503
    assert loading.options("/echo").status_code == 200


def test_cors_preflight_and_origin() -> None:
    response = client(keys=("secret",)).options("/echo", headers={"Origin": "https://app.example"})
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert response.headers["Access-Control-Allow-Methods"] == "GET, POST, DELETE, OPTIONS"  # llama-server's
    assert response.headers["Access-Control-Allow-Headers"] == "*"
    assert response.headers["Access-Control-Allow-Credentials"] == "true"
    plain = client().post("/echo", json={}, headers={"Origin": "https://app.example"})
    assert plain.headers["Access-Control-Allow-Origin"] == "https://app.example"


@pytest.mark.parametrize(("policy", "origin", "allowed"), [
    (CorsPolicy(), "https://any.example", "https://any.example"),  # *, credentials: echoed
    (CorsPolicy(credentials=False), "https://any.example", "*"),
    (CorsPolicy(origins="localhost"), "http://localhost:5173", "http://localhost:5173"),
    (CorsPolicy(origins="localhost"), "http://127.0.0.1", "http://127.0.0.1"),
    (CorsPolicy(origins="localhost"), "http://[::1]:8000", "http://[::1]:8000"),
    (CorsPolicy(origins="localhost"), "https://localhost.evil.example", None),
    (CorsPolicy(origins="https://a.example, https://b.example"), "https://b.example", "https://b.example"),
    (CorsPolicy(origins="https://a.example,localhost"), "http://localhost:3000", "http://localhost:3000"),
    (CorsPolicy(origins="https://a.example"), "https://c.example", None),
    (CorsPolicy(origins="https://a.example"), None, None),
])
def test_cors_origins_as_llama_server_takes_them(policy: CorsPolicy, origin: str | None, allowed: str | None) -> None:
    app = create_app(ROUTES, lambda: True, cors=policy).test_client()
    response = app.post("/echo", json={}, headers={"Origin": origin} if origin else {})
    assert response.headers.get("Access-Control-Allow-Origin") == allowed
    assert policy.allowed_origin(origin) == allowed


def test_cors_methods_headers_and_credentials_are_the_preflight_answer() -> None:
    policy = CorsPolicy(methods="GET, POST", headers="Content-Type, Authorization", credentials=False)
    response = create_app(ROUTES, lambda: True, cors=policy).test_client().options(
        "/echo", headers={"Origin": "https://app.example"})
    assert response.status_code == 200
    assert (response.headers["Access-Control-Allow-Methods"], response.headers["Access-Control-Allow-Headers"],
            response.headers["Access-Control-Allow-Credentials"]) == ("GET, POST", "Content-Type, Authorization",
                                                                      "false")


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer wrong"}, 401),
        ({"Authorization": "Bearer secret"}, 200),
        ({"Authorization": "Bearer other"}, 200),
        ({"X-Api-Key": "secret"}, 200),
        ({"X-Api-Key": "nope"}, 401),
    ],
)
def test_api_key(headers: dict[str, str], status: int) -> None:
    response = client(keys=("secret", "other")).post("/echo", json={}, headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.get_json()["error"] == {"code": 401, "message": "Invalid API Key",
                                                "type": "authentication_error"}


def test_public_routes_need_no_key() -> None:
    assert client(keys=("secret",)).get("/health").status_code == 200


def test_malformed_json_is_400() -> None:
    response = client().post("/echo", data=b"{oops", content_type="application/json")
    assert response.status_code == 400
    assert "not valid JSON" in response.get_json()["error"]["message"]
    bad_utf8 = client().post("/echo", data=b'{"a": "\xff"}', content_type="application/json")
    assert bad_utf8.status_code == 400
    assert "UTF-8" in bad_utf8.get_json()["error"]["message"]
    nan = client().post("/echo", data=b'{"a": NaN}', content_type="application/json")
    assert nan.status_code == 400


def test_an_unexpected_error_is_a_json_500_and_the_app_keeps_serving() -> None:
    app_client = client()
    response = app_client.post("/crash", json={})
    assert response.status_code == 500
    assert response.get_json()["error"]["type"] == "server_error"
    assert app_client.get("/health").status_code == 200


def test_an_error_mid_stream_is_sent_as_an_event() -> None:
    response = client().post("/stream", json={})
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert response.headers["X-Accel-Buffering"] == "no"
    text = response.get_data(as_text=True)
    assert text.startswith('data: {"n":1}\n\n')
    assert 'data: {"error":{"code":400,"message":"went wrong mid-stream","type":"invalid_request_error"}}' in text


def test_api_prefix_mounts_every_route() -> None:
    prefixed = client(prefix="/api")
    assert prefixed.get("/api/health").status_code == 200
    assert prefixed.get("/health").status_code == 404


def test_polled_routes_log_their_successes_at_debug_and_their_failures_at_info(
        caplog: pytest.LogCaptureFixture) -> None:
    """As llama-server leaves health checks, model lists, props and metrics out of its request log:
    Vertex AI's health checker would otherwise write a line every few seconds. A failure is news."""
    polled = Route("GET", "/health", "get_health", guard(lambda r: ApiReply(body={"status": "ok"})), public=True,
                   polled=True)
    routes = [polled, Route("POST", "/echo", "echo", guard(echo))]
    ready = [False]
    app = create_app(routes, lambda: ready[0]).test_client()

    def access_levels() -> list[tuple[int, str]]:
        return [(r.levelno, r.getMessage().split(" id=")[0].rsplit(" ", 1)[0]) for r in caplog.records
                if r.name == "app.access"]

    with caplog.at_level("DEBUG", logger="app.access"):
        app.get("/health").close()  # loading: 503
        ready[0] = True
        app.get("/health").close()
        app.post("/echo", json={}).close()
    assert access_levels() == [(logging.INFO, "GET /health 503"), (logging.DEBUG, "GET /health 200"),
                               (logging.INFO, "POST /echo 200")]
    caplog.clear()
    with caplog.at_level("INFO", logger="app.access"):
        reply = app.get("/health")
        reply.close()
    assert reply.headers["X-Request-Id"] and access_levels() == []  # the id is still echoed
