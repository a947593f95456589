"""The gRPC door (``--grpc-port``) on the real server, with a real gRPC client: the Llama service's four
methods over the same engine as HTTP, grpc.health.v1, reflection, the API key, a deadline that stops
the generation, and Vertex AI's ``:directRawPredict`` through the stand-in with the aiplatform client."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests
from google.protobuf import descriptor_pool, json_format, struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from tests.integration.conftest import Server, free_port, start
from tests.vertex_standin import RunningStandIn, VertexStandIn

KEY = "grpc-sekret"
SERVICE = "vertex_llama.v1.Llama"
CHAT = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 6, "temperature": 0}


@pytest.fixture(scope="module")
def grpc_server(server_dir: Path) -> Iterator[tuple[Server, str]]:
    port = free_port()
    server = start(server_dir, ["-np", "2", "-c", "8192", "--metrics", "--grpc-port", str(port), "--api-key", KEY],
                   {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "/predict"})
    yield server, f"127.0.0.1:{port}"
    assert server.stop() == 0, server.log()


@pytest.fixture
def channel(grpc_server: tuple[Server, str]) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(grpc_server[1]) as opened:
        yield opened


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


def unary(channel: grpc.Channel, method: str, body: dict[str, Any], key: str | None = KEY, **kwargs: Any) -> Any:
    call = channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=struct_pb2.Struct.SerializeToString,
                               response_deserializer=struct_pb2.Struct.FromString)
    metadata = (("authorization", f"Bearer {key}"),) if key else ()
    return json_format.MessageToDict(call(struct(body), metadata=metadata, timeout=kwargs.pop("timeout", 120)))


def streamed(channel: grpc.Channel, method: str, body: dict[str, Any]) -> list[Any]:
    call = channel.unary_stream(f"/{SERVICE}/{method}", request_serializer=struct_pb2.Struct.SerializeToString,
                                response_deserializer=struct_pb2.Struct.FromString)
    return [json_format.MessageToDict(m) for m in call(struct(body), metadata=(("x-api-key", KEY),), timeout=120)]


def test_health_says_serving_and_reflection_describes_the_service(channel: grpc.Channel) -> None:
    stub: Any = health_pb2_grpc.HealthStub(channel)
    for name in ("", SERVICE):
        status = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    database = ProtoReflectionDescriptorDatabase(channel)
    assert {SERVICE, "grpc.health.v1.Health"} <= set(database.get_services())
    service = descriptor_pool.DescriptorPool(database).FindServiceByName(SERVICE)
    methods = {m.name: (m.input_type.full_name, m.output_type.full_name, m.server_streaming) for m in service.methods}
    struct_name = "google.protobuf.Struct"
    assert methods == {"Predict": (struct_name, struct_name, False), "StreamPredict": (struct_name, struct_name, True),
                       "ChatCompletions": (struct_name, struct_name, False),
                       "StreamChatCompletions": (struct_name, struct_name, True)}


def test_chat_unary_and_streamed_are_the_http_answers(channel: grpc.Channel, grpc_server: tuple[Server, str]) -> None:
    answer = unary(channel, "ChatCompletions", CHAT)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
    over_http = requests.post(grpc_server[0].url("/v1/chat/completions"), json=CHAT, timeout=120,
                              headers={"Authorization": f"Bearer {KEY}"}).json()
    assert answer["choices"][0]["message"]["content"] == over_http["choices"][0]["message"]["content"]
    chunks = streamed(channel, "StreamChatCompletions", CHAT)
    assert chunks and all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert text == answer["choices"][0]["message"]["content"]


def test_predict_fans_out_and_streams_one_instance(channel: grpc.Channel) -> None:
    answer = unary(channel, "Predict", {"instances": [{"@requestFormat": "tokenize", "content": "hello"},
                                                      {"@requestFormat": "chatCompletions", **CHAT}]})
    tokens, chat = answer["predictions"]
    assert tokens["tokens"] and chat["object"] == "chat.completion"
    chunks = streamed(channel, "StreamPredict", {"instances": [{"@requestFormat": "chatCompletions", **CHAT,
                                                                "stream": True}]})
    assert len(chunks) > 1 and chunks[0]["object"] == "chat.completion.chunk"
    # an answer that does not stream is the stream's one message
    assert streamed(channel, "StreamPredict", {"instances": [{"@requestFormat": "health"}]}) == [
        {"predictions": [{"status": "ok"}]}]


def test_errors_carry_the_status_and_the_llama_server_body(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        unary(channel, "ChatCompletions", CHAT, key=None)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as bad:
        unary(channel, "ChatCompletions", {**CHAT, "messages": "wrong"})
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "messages" in (bad.value.details() or "")
    trailing: dict[str, Any] = {item.key: item.value for item in bad.value.trailing_metadata() or ()}
    assert json.loads(trailing["error-json"])["error"]["type"] == "invalid_request_error"
    with pytest.raises(grpc.RpcError) as streams:
        unary(channel, "Predict", {"instances": [{"@requestFormat": "chatCompletions", **CHAT, "stream": True}]})
    assert streams.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "StreamPredict" in (streams.value.details()
                                                                                           or "")


def test_a_passed_deadline_stops_the_generation(channel: grpc.Channel, grpc_server: tuple[Server, str]) -> None:
    long = {**CHAT, "max_tokens": 3000, "ignore_eos": True}
    before = grpc_server[0].metric("llamacpp:n_decode_total")
    with pytest.raises(grpc.RpcError) as late:
        unary(channel, "ChatCompletions", long, timeout=1.5)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # a wait, not a limit: the assertion is below
    slots: list[Any] = grpc_server[0].wait_slots_idle(timeout=120, headers={"Authorization": f"Bearer {KEY}"})
    assert not any(slot["is_processing"] for slot in slots)
    decodes = grpc_server[0].metric("llamacpp:n_decode_total") - before
    assert 0 < decodes < 3000  # it stopped when the call ended, not at its 3,000-token budget


def test_vertex_direct_raw_predict_reaches_the_service(grpc_server: tuple[Server, str]) -> None:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1 as v1

    server, target = grpc_server
    running = RunningStandIn(VertexStandIn(server.base, grpc_target=target,
                                                   grpc_metadata=(("x-api-key", KEY),)))
    endpoint = "projects/demo/locations/us-central1/endpoints/9"
    running.standin.endpoints[endpoint] = {"name": endpoint, "deployedModels": [{"id": "1"}]}
    try:
        client = v1.PredictionServiceClient(client_options=ClientOptions(api_endpoint=running.url), transport="rest",
                                            credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
        request = v1.DirectRawPredictRequest(endpoint=endpoint, method_name=f"/{SERVICE}/Predict",
                                             input=struct({"instances": [{"@requestFormat": "tokenize",
                                                                          "content": "hi"}]}).SerializeToString())
        output = struct_pb2.Struct.FromString(client.direct_raw_predict(request=request).output)
        assert json_format.MessageToDict(output)["predictions"][0]["tokens"]
        sent = next(call for call in running.standin.calls if call.path.endswith(":directRawPredict"))
        assert sent.body["methodName"] == f"/{SERVICE}/Predict" and base64.b64decode(sent.body["input"])
    finally:
        running.close()
