"""The Vertex AI layer: AIP_* environment, alias derivation, predict fan-out (with fake routes)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from app.handlers.routes import ROUTES
from app.protocol.api import ApiReply, ApiRequest, InvalidRequestError, Route, SseEvent, guard
from app.vertex import AliasTable, VertexEnvironmentError, derive_alias, read_vertex_environment, vertex_routes
from app.vertex.environment import VertexEnvironment


@pytest.mark.parametrize(
    ("path", "alias"),
    [
        ("/health", "health"),
        ("/v1/health", "health"),
        ("/completion", "completion"),
        ("/v1/chat/completions", "chatCompletions"),
        ("/chat/completions", "chatCompletions"),
        ("/apply-template", "applyTemplate"),
        ("/v1/messages/count_tokens", "messagesCountTokens"),
        ("/v1/chat/completions/input_tokens", "chatCompletionsInputTokens"),
        ("/lora-adapters", "loraAdapters"),
        ("/slots/:id_slot", "slots"),
        ("/v1/stream/:conv_id", "stream"),
        ("/v1", "v1"),
    ],
)
def test_derive_alias_like_llama_server(path: str, alias: str) -> None:
    assert derive_alias(path) == alias


def fake_route(method: str, path: str, name: str, reply: Any = None) -> Route:
    def handler(request: ApiRequest) -> ApiReply:
        return ApiReply(body=reply if reply is not None else {"handled_by": name, "body": request.json()})

    return Route(method, path, name, guard(handler))


def test_first_registration_wins_and_collisions_are_reported() -> None:
    routes = [
        fake_route("POST", "/completions", "native"),
        fake_route("POST", "/v1/completions", "openai"),
        fake_route("POST", "/chat/completions", "chat"),
        fake_route("POST", "/v1/chat/completions", "chat"),
        fake_route("GET", "/props", "get_props"),
        fake_route("POST", "/props", "post_props"),
    ]
    table = AliasTable(routes)
    assert table.resolve("completions") is routes[0]
    assert table.resolve("/v1/completions") is routes[1]
    assert table.resolve("chatCompletions") is routes[2]
    assert [(c.alias, c.winner.name, c.loser.name) for c in table.collisions] == [
        ("completions", "native", "openai")
    ]
    assert table.resolve("props") is routes[4]
    assert table.resolve("/props") is routes[4]
    assert table.shadowed == [routes[5]]
    assert table.resolve("nothing") is None


def test_the_real_table_resolves_completions_to_the_native_route() -> None:
    routes = [Route(s.method, s.path, s.handler.__name__, lambda r: ApiReply()) for s in ROUTES]
    table = AliasTable(routes)
    assert table.resolve("completions").path == "/completions"  # type: ignore[union-attr]
    assert table.resolve("chatCompletions").name == "post_chat_completions"  # type: ignore[union-attr]
    assert table.resolve("applyTemplate").path == "/apply-template"  # type: ignore[union-attr]


def test_vertex_environment() -> None:
    assert read_vertex_environment({}) is None
    assert read_vertex_environment({"AIP_MODE": "prediction"}) is None
    env = read_vertex_environment({"AIP_MODE": "PREDICTION"})
    assert env == VertexEnvironment(port=8080, predict_route="/predict", health_route=None, storage_uri=None)
    env = read_vertex_environment({
        "AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "9000", "AIP_PREDICT_ROUTE": "v1/endpoints/1:predict",
        "AIP_HEALTH_ROUTE": "", "AIP_STORAGE_URI": "gs://bucket/model",
    })
    assert env is not None
    assert (env.port, env.predict_route, env.health_route) == (9000, "/v1/endpoints/1:predict", None)
    assert env.storage_uri == "gs://bucket/model"
    with pytest.raises(VertexEnvironmentError, match="AIP_HTTP_PORT"):
        read_vertex_environment({"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "eighty"})


def test_a_predict_route_that_hides_an_api_route_is_refused() -> None:
    env = VertexEnvironment(port=8080, predict_route="/tokenize", health_route=None, storage_uri=None)
    with pytest.raises(VertexEnvironmentError, match="conflicts"):
        env.check_routes(spec.path for spec in ROUTES)


@pytest.fixture
def pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=16)


def predict_route(routes: list[Route], pool: ThreadPoolExecutor, health: str | None = None) -> Route:
    env = VertexEnvironment(port=8080, predict_route="/predict", health_route=health, storage_uri=None)
    if not any(route.path == "/v1/chat/completions" for route in routes):
        routes = [*routes, fake_route("POST", "/v1/chat/completions", "chat")]
    table = vertex_routes(routes, env, pool)
    return next(route for route in table if route.path == "/predict")


def call(route: Route, body: Any) -> ApiReply:
    import json

    return route.handler(ApiRequest("POST", route.path, body=json.dumps(body).encode()))


def test_predict_answers_each_instance_in_order(pool: ThreadPoolExecutor) -> None:
    def failing(request: ApiRequest) -> ApiReply:
        raise InvalidRequestError("Field 'x': bad")

    routes = [
        fake_route("POST", "/tokenize", "tokenize"),
        Route("POST", "/detokenize", "detokenize", guard(failing)),
        fake_route("GET", "/metrics", "metrics"),
    ]
    routes[2] = Route("GET", "/metrics", "metrics", lambda r: ApiReply(text="llamacpp:x 1\n"))
    reply = call(predict_route(routes, pool), {"instances": [
        {"@requestFormat": "tokenize", "content": "a", "stream": False, "n": 2.0, "t": 0.5},
        {"@requestFormat": "detokenize"},
        {"@requestFormat": "/tokenize", "content": "b"},
        {"@requestFormat": "metrics"},
        {"@requestFormat": "nope"},
        {"content": "no format"},
        {"@requestFormat": 7},
        "not an object",
    ], "parameters": {"shared": 1, "content": "from parameters"}})
    assert reply.status == 200
    predictions = reply.body["predictions"]
    assert predictions[0] == {"handled_by": "tokenize",
                              "body": {"shared": 1, "content": "a", "stream": False, "n": 2, "t": 0.5}}
    assert isinstance(predictions[0]["body"]["n"], int)
    assert predictions[1] == {"error": {"code": 400, "message": "Field 'x': bad", "type": "invalid_request_error"}}
    assert predictions[2]["body"] == {"shared": 1, "content": "b"}
    assert predictions[3] == "llamacpp:x 1\n"
    assert predictions[4]["error"]["message"] == "no handler registered for @requestFormat: nope"
    assert predictions[5]["error"]["message"] == "each instance must include a string @requestFormat"
    assert predictions[6]["error"]["message"] == "each instance must include a string @requestFormat"
    assert predictions[7]["error"]["message"] == "each instance must be a JSON object"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "request body must be a JSON object"),
        (b'{"instances": {}}', "request body must include an array field named instances"),
    ],
)
def test_envelope_errors_are_400(pool: ThreadPoolExecutor, body: bytes, message: str) -> None:
    route = predict_route([fake_route("POST", "/tokenize", "tokenize")], pool)
    reply = route.handler(ApiRequest("POST", "/predict", body=body))
    assert reply.status == 400
    assert message in reply.body["error"]["message"]


def test_more_than_128_instances_is_400(pool: ThreadPoolExecutor) -> None:
    route = predict_route([fake_route("POST", "/tokenize", "tokenize")], pool)
    reply = call(route, {"instances": [{"@requestFormat": "tokenize"}] * 129})
    assert reply.status == 400
    assert reply.body["error"]["message"] == "instances array exceeds maximum size of 128"
    assert call(route, {"instances": [{"@requestFormat": "tokenize"}] * 128}).status == 200


def test_instances_run_concurrently(pool: ThreadPoolExecutor) -> None:
    barrier = threading.Barrier(6, timeout=5)

    def meet(request: ApiRequest) -> ApiReply:
        barrier.wait()  # only returns once all six instances are in flight together
        return ApiReply(body={"met": True})

    route = predict_route([Route("POST", "/tokenize", "tokenize", guard(meet))], pool)
    reply = call(route, {"instances": [{"@requestFormat": "tokenize"}] * 6})
    assert reply.body["predictions"] == [{"met": True}] * 6


def test_a_streaming_reply_is_refused_inside_a_non_streaming_predict(pool: ThreadPoolExecutor) -> None:
    def streams(request: ApiRequest) -> ApiReply:
        return ApiReply(stream=iter([SseEvent({"x": 1})]))

    route = predict_route([Route("POST", "/completion", "completion", guard(streams))], pool)
    reply = call(route, {"instances": [{"@requestFormat": "completion"}]})
    assert "does not support streaming" in reply.body["predictions"][0]["error"]["message"]


def test_one_streaming_instance_is_answered_with_the_stream(pool: ThreadPoolExecutor) -> None:
    def streams(request: ApiRequest) -> ApiReply:
        assert request.json()["stream"] is True
        return ApiReply(stream=iter([SseEvent({"x": 1})]))

    route = predict_route([Route("POST", "/completion", "completion", guard(streams))], pool)
    reply = call(route, {"instances": [{"@requestFormat": "completion", "stream": True}]})
    assert reply.stream is not None and list(reply.stream) == [SseEvent({"x": 1})]
    many = call(route, {"instances": [{"@requestFormat": "completion"}] * 2, "parameters": {"stream": True}})
    assert many.status == 400 and "exactly one instance" in many.body["error"]["message"]


def test_a_raw_body_goes_to_the_default_route(pool: ThreadPoolExecutor) -> None:
    route = predict_route([fake_route("POST", "/tokenize", "tokenize")], pool)
    reply = call(route, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16.0})
    assert reply.body == {"handled_by": "chat", "body": {"messages": [{"role": "user", "content": "hi"}],
                                                         "max_tokens": 16.0}}


def test_instances_without_a_format_are_routed_by_shape(pool: ThreadPoolExecutor) -> None:
    """messages (OpenAI chat), then inputs (TGI), then prompt (Model Garden vLLM), each answered as
    that container answers; anything else needs @requestFormat."""
    seen: list[dict[str, Any]] = []

    def completion(request: ApiRequest) -> ApiReply:
        body = request.json()
        seen.append(body)
        return ApiReply(body={"content": f"<{body['prompt']}>"})

    routes = [Route("POST", "/completion", "completion", guard(completion))]
    reply = call(predict_route(routes, pool), {"instances": [
        {"messages": [], "inputs": "ignored: messages come first"},
        {"inputs": "tgi", "parameters": {"max_new_tokens": 5, "do_sample": False, "repetition_penalty": 1.1}},
        {"prompt": "mg", "max_tokens": 7, "top_k": 1},
        {"prompt": "raw", "raw_response": True},
        {"input": "y"},
    ]})
    chat, tgi, vllm, raw, other = reply.body["predictions"]
    assert chat["handled_by"] == "chat"
    assert tgi == "<tgi>" and vllm == "Prompt:\nmg\nOutput:\n<mg>" and raw == "<raw>"
    assert seen[0] == {"prompt": "tgi", "n_predict": 5, "temperature": 0.0, "repeat_penalty": 1.1}
    assert seen[1] == {"prompt": "mg", "n_predict": 7, "top_k": 1}
    assert other["error"]["message"] == "each instance must include a string @requestFormat"


def test_the_health_route_alias(pool: ThreadPoolExecutor) -> None:
    env = VertexEnvironment(port=8080, predict_route="/predict", health_route="/ping", storage_uri=None)
    health = replace(fake_route("GET", "/health", "get_health", {"status": "ok"}), polled=True)
    routes = vertex_routes([health, fake_route("POST", "/v1/chat/completions", "chat")], env, pool)
    ping = next(route for route in routes if route.path == "/ping")
    assert ping.method == "GET" and ping.public and ping.polled  # quiet in the access log, as /health
    assert ping.handler(ApiRequest("GET", "/ping")).body == {"status": "ok"}
    # neither Vertex route is itself an alias target
    predict = next(route for route in routes if route.path == "/predict")
    reply = call(predict, {"instances": [{"@requestFormat": "ping"}, {"@requestFormat": "predict"}]})
    assert all("no handler" in p["error"]["message"] for p in reply.body["predictions"])


def test_a_predict_answer_over_the_response_limit_is_an_error_naming_it(pool: ThreadPoolExecutor) -> None:
    env = VertexEnvironment(port=8080, predict_route="/predict", health_route=None, storage_uri=None)
    routes = [fake_route("POST", "/tokenize", "tokenize"), fake_route("POST", "/v1/chat/completions", "chat")]
    limited = next(r for r in vertex_routes(routes, env, pool, max_response_bytes=300) if r.path == "/predict")
    small = call(limited, {"instances": [{"@requestFormat": "tokenize", "content": "a"}]})
    assert small.status == 200
    big = call(limited, {"instances": [{"@requestFormat": "tokenize", "content": "x" * 100}] * 4})
    assert big.status == 400
    message = big.body["error"]["message"]
    assert "--max-response-bytes 300" in message and "dedicated endpoint" in message and "fewer instances" in message


def test_kind_mismatch_between_a_model_and_its_endpoint() -> None:
    from gcp.limits import endpoint_limits, kind_mismatch

    shared, dedicated = endpoint_limits("shared"), endpoint_limits("dedicated", 900)
    assert kind_mismatch(shared, dedicated=False, timeout_s=60) is None
    assert kind_mismatch(dedicated, dedicated=True, timeout_s=900) is None
    assert kind_mismatch({}, dedicated=False, timeout_s=60) is None  # no kind declared
    assert "cuts requests at 60 s" in str(kind_mismatch(dedicated, dedicated=False, timeout_s=60))
    assert "uploaded for a shared endpoint" in str(kind_mismatch(shared, dedicated=True, timeout_s=900))
    assert "cuts requests at 300 s" in str(kind_mismatch(dedicated, dedicated=True, timeout_s=300))


def test_the_alias_listing_route_is_public_and_tells_the_whole_table(pool: ThreadPoolExecutor) -> None:
    routes = vertex_routes(list(bind_routes_for_listing()), VertexEnvironment(
        port=8080, predict_route="/predict", health_route=None, storage_uri=None), pool)
    listing_route = next(route for route in routes if route.path == "/vertex/aliases")
    assert listing_route.method == "GET" and listing_route.public
    listing = listing_route.handler(ApiRequest("GET", "/vertex/aliases")).body
    assert listing["predict_route"] == "/predict" and listing["default_route"] == "/v1/chat/completions"
    assert listing["max_instances"] == 128
    by_alias = {item["alias"]: item for item in listing["aliases"]}
    assert by_alias["chatCompletions"]["path"] == "/chat/completions" and by_alias["chatCompletions"]["streams"]
    assert by_alias["completions"]["path"] == "/completions"  # first registration wins
    loser = next(c for c in listing["collisions"] if c["loser"]["path"] == "/v1/completions")
    assert loser["alias"] == "completions" and loser["loser_reachable_as"] == "/v1/completions"
    assert {"method": "POST", "path": "/props", "name": "post_props"} in listing["shadowed"]
    # every alias it lists resolves through the predict route's own table, to the route it names
    predict = next(route for route in routes if route.path == "/predict")
    table = AliasTable([route for route in routes if route.path not in ("/predict", "/vertex/aliases")
                        and not route.path.startswith("/slots")])  # hidden from predict: --predict-slots
    for item in listing["aliases"]:
        resolved = table.resolve(item["alias"])
        assert resolved is not None and (resolved.method, resolved.path) == (item["method"], item["path"])
    # the listing route is not itself an alias target
    reply = call(predict, {"instances": [{"@requestFormat": "vertexAliases"}]})
    assert "no handler" in reply.body["predictions"][0]["error"]["message"]


def bind_routes_for_listing() -> list[Route]:
    """The real endpoint table's shape (method, path, name), each answering its own path."""
    return [replace(fake_route(spec.method, spec.path, spec.handler.__name__, {"path": spec.path}),
                    streams=spec.streams) for spec in ROUTES]


def test_openai_batch_rows_are_answered_in_order_as_openai_batch_output(pool: ThreadPoolExecutor) -> None:
    def refuse(request: ApiRequest) -> ApiReply:
        raise InvalidRequestError("input is required")

    routes = [fake_route("GET", "/health", "get_health", {"status": "ok"}),
              fake_route("POST", "/v1/chat/completions", "chat"),
              fake_route("POST", "/v1/completions", "completions"),
              Route("POST", "/v1/embeddings", "embeddings", guard(refuse))]
    predict = predict_route(routes, pool)
    rows = [
        {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
         "body": {"messages": [], "max_tokens": 5.0}},
        {"custom_id": "b", "url": "/v1/completions?x=1", "body": {"prompt": "p", "temperature": 0.5}},
        {"custom_id": "c", "method": "POST", "url": "/v1/embeddings", "body": {}},
        {"custom_id": "d", "method": "POST", "url": "/v1/nothing", "body": {}},
        {"custom_id": "e", "method": "POST", "url": "/health", "body": {}},
        {"custom_id": "f", "method": "POST", "url": "/v1/completions", "body": "text"},
        {"@requestFormat": "health", "custom_id": "g", "url": "/v1/completions", "body": {}},
    ]
    predictions = call(predict, {"instances": rows, "parameters": {"temperature": 0.0, "max_tokens": 9}}).body[
        "predictions"]
    assert [p.get("custom_id") for p in predictions[:6]] == ["a", "b", "c", "d", "e", "f"]
    first = predictions[0]
    assert first["id"].startswith("batch_req_") and first["error"] is None
    assert first["response"]["status_code"] == 200 and first["response"]["request_id"]
    # parameters go into the body, the body's own keys win, integral floats become integers
    assert first["response"]["body"] == {"handled_by": "chat", "body": {"messages": [], "max_tokens": 5,
                                                                        "temperature": 0.0}}
    assert predictions[1]["response"]["body"]["body"] == {"prompt": "p", "temperature": 0.5, "max_tokens": 9}
    refused = predictions[2]["response"]
    assert refused["status_code"] == 400 and refused["body"]["error"]["message"] == "input is required"
    assert predictions[3]["response"] is None and predictions[3]["error"]["code"] == "invalid_url"
    assert predictions[4]["error"] == {"code": "invalid_method", "message": "/health takes GET, not POST"}
    assert predictions[5]["error"]["code"] == "invalid_request"
    assert predictions[6] == {"status": "ok"}  # @requestFormat comes first


def test_waiting_for_a_batch_job_reports_each_change_until_it_ends() -> None:
    from google.cloud import aiplatform_v1 as v1

    from gcp.batch import job_summary, wait_for_job

    def job(state: str, done: int) -> v1.BatchPredictionJob:
        return v1.BatchPredictionJob(name="projects/p/locations/r/batchPredictionJobs/1", state=state,
                                     completion_stats=v1.CompletionStats(successful_count=done))

    answers = iter([job("JOB_STATE_PENDING", 0), job("JOB_STATE_RUNNING", 0), job("JOB_STATE_RUNNING", 0),
                    job("JOB_STATE_RUNNING", 64), job("JOB_STATE_SUCCEEDED", 100)])
    slept: list[float] = []
    reported: list[tuple[str, int]] = []
    final = wait_for_job(lambda: next(answers), 30, slept.append,
                         lambda seen: reported.append((seen.state.name, seen.completion_stats.successful_count)))
    assert slept == [30, 30, 30, 30]  # simulated time: 2 minutes of polling, no real waiting
    assert reported == [("JOB_STATE_PENDING", 0), ("JOB_STATE_RUNNING", 0), ("JOB_STATE_RUNNING", 64),
                        ("JOB_STATE_SUCCEEDED", 100)]
    assert job_summary(final) == {"job": "projects/p/locations/r/batchPredictionJobs/1", "state": "JOB_STATE_SUCCEEDED",
                                  "rows": 100, "successful": 100, "failed": 0, "incomplete": 0, "output": None,
                                  "error": None}


def test_the_installed_aiplatform_has_every_field_the_tool_sends() -> None:
    """pyproject.toml's floor (1.100, the first with invokeRoutePrefix) and what gcp/ sets."""
    from google.cloud import aiplatform_v1 as v1

    needed: dict[Any, set[str]] = {
        v1.ModelContainerSpec: {"invoke_route_prefix", "predict_route", "health_route", "deployment_timeout",
                                "startup_probe", "health_probe", "liveness_probe", "shared_memory_size_mb"},
        v1.Probe: {"exec_", "http_get", "period_seconds", "timeout_seconds", "failure_threshold"},
        v1.DedicatedResources: {"spot", "required_replica_count", "autoscaling_metric_specs"},
        v1.DeployedModel: {"service_account", "display_name"},
        v1.Endpoint: {"dedicated_endpoint_enabled", "client_connection_config", "dedicated_endpoint_dns"},
        v1.BatchPredictionJob: {"service_account", "manual_batch_tuning_parameters", "model_parameters",
                                "dedicated_resources", "completion_stats", "output_info"},
    }
    for message, names in needed.items():
        assert names <= set(message.meta.fields), (message.__name__, names - set(message.meta.fields))


def test_doctor_estimates_partial_offload_and_slow_downloads() -> None:
    from gcp.doctor import GIB, ModelShape, Plan, download_finding, machine_resources, memory_findings

    shape = ModelShape(n_layer=40, n_ctx_train=8192, kv_values_per_token=40 * 8 * 256, n_embd=5120, n_vocab=32000)
    plan = Plan("g2-standard-12", "NVIDIA_L4", 1, 4096, 4, 3600, 1)
    gpu = next(f for f in memory_findings(shape, plan, weights=26 * GIB) if f.check == "gpu memory")
    assert gpu.status == "warn" and "of 40 layers fit" in gpu.detail
    layers = int(gpu.detail.split(" of 40 layers")[0].rsplit(" ", 1)[1])
    assert 0 < layers < 40 and f"--n-gpu-layers {layers}" in gpu.fix
    assert memory_findings(shape, Plan("g2-standard-12", "NVIDIA_L4", 2, 4096, 4, 3600, 1),
                           weights=26 * GIB)[1].status == "pass"  # two L4s hold it
    slow = download_finding(400 * GIB, Plan("g2-standard-4", "NVIDIA_L4", 1, 0, 4, 600, 1))
    assert slow.status == "fail" and "--deployment-timeout" in slow.fix
    assert machine_resources("n1-standard-8") == (8, 30.0) and machine_resources("g2-standard-24") == (24, 96.0)
    assert machine_resources("x9-unknown-1") is None


def test_a_predict_instance_reaches_the_slots_only_when_asked(pool: ThreadPoolExecutor) -> None:
    """/slots shows every user's slots: by default a predict caller (anyone who may call the endpoint)
    reaches neither the view nor the slot actions; --predict-slots lets it."""
    environment = VertexEnvironment(port=8080, predict_route="/predict", health_route=None, storage_uri=None)
    for asked in (False, True):
        routes = vertex_routes(list(bind_routes_for_listing()), environment, pool, predict_slots=asked)
        predict = next(route for route in routes if route.path == "/predict")
        predictions = call(predict, {"instances": [{"@requestFormat": "slots"}, {"@requestFormat": "/slots"}]}
                           ).body["predictions"]
        if asked:
            assert predictions == [{"path": "/slots"}, {"path": "/slots"}]
        else:
            assert all("no handler" in prediction["error"]["message"] for prediction in predictions)
        assert any(route.path == "/slots" for route in routes)  # the HTTP route itself is the table's
