"""The CPU image, run the way Vertex AI runs it: its ENTRYPOINT as its USER (uid 1000), with
``AIP_MODE=PREDICTION``, ``AIP_HTTP_PORT``, ``AIP_HEALTH_ROUTE``, ``AIP_PREDICT_ROUTE`` and the model
from ``AIP_STORAGE_URI`` (a ``gs://`` directory on the storage emulator). Health answers 503 while the
model loads and 200 after; a predict with a chat and a tokenize instance; the web UI's page; and
SIGTERM lets an in-flight stream finish before the container exits 0."""

from __future__ import annotations

import base64
import json
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.containers import Container, image_config, process_uid, run_container
from tests.integration.conftest import model_in_storage
from tests.projectors import make_vision_projector
from tests.videos import make_video

pytestmark = pytest.mark.timeout(1800)  # the first test may build the image (scripts/image.sh)

HEALTH = "/vertex/health"
PREDICT = "/vertex/predict"
MSG = [{"role": "user", "content": "Count to twenty."}]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Started:
    def __init__(self, container: Container, port: int, statuses: list[int | str], grpc_port: int) -> None:
        self.container = container
        self.port = port
        self.statuses = statuses
        self.grpc_port = grpc_port

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def wait_healthy(container: Container, url: str) -> list[int | str]:
    """Every answer of the health route from the container's start until it says 200 (a refused
    connection counts as 'refused'), polled without a deadline of its own (pytest's timeout holds)."""
    statuses: list[int | str] = []
    while True:
        if container.process.poll() is not None:
            raise AssertionError(f"the container exited ({container.process.returncode}):\n{container.log()}")
        status: int | str
        try:
            status = requests.get(url, timeout=10).status_code
        except requests.ConnectionError:
            status = "refused"
        if not statuses or statuses[-1] != status:
            statuses.append(status)
        if status == 200:
            return statuses
        time.sleep(0.05)


@pytest.fixture(scope="module")
def vertex_container(tool: str, image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    port, grpc_port = free_port(), free_port()
    projector = make_vision_projector(tmp_path_factory.mktemp("projector") / "mmproj-test.gguf")
    with model_in_storage({"mmproj-test.gguf": projector}) as (emulator, uri):
        env = {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port), "AIP_HEALTH_ROUTE": HEALTH,
               "AIP_PREDICT_ROUTE": PREDICT, "AIP_STORAGE_URI": uri.rsplit("/", 1)[0],
               "STORAGE_EMULATOR_HOST": emulator, "LLAMA_ARG_GRPC_PORT": str(grpc_port)}
        container = run_container(tool, image, env, tmp_path_factory.mktemp("image") / "container.log")
        try:
            statuses = wait_healthy(container, f"http://127.0.0.1:{port}{HEALTH}")
            yield Started(container, port, statuses, grpc_port)
        finally:
            container.remove()


def test_the_image_runs_its_entrypoint_as_uid_1000_and_sets_no_aip_variables(tool: str, image: str,
                                                                            vertex_container: Started) -> None:
    config = image_config(tool, image)
    assert config["User"] == "1000"
    assert not any(str(line).startswith("AIP_") for line in config.get("Env") or [])  # type: ignore[attr-defined]
    assert process_uid(vertex_container.container.main_pid()) == 1000


def test_the_log_says_whether_it_serves_on_a_gpu(tool: str, image: str, vertex_container: Started) -> None:
    """No GPU here: a CUDA image starts all the same, and says that it found no driver and serves on
    the CPU; a CPU image says nothing of GPUs."""
    labels = image_config(tool, image).get("Labels")
    variant = labels.get("vertex-llama.variant") if isinstance(labels, dict) else None
    log = vertex_container.container.log()
    if variant == "cuda":
        assert "no NVIDIA driver was found" in log and "serving on the CPU" in log, log[-3000:]
    else:
        assert variant == "cpu" and "NVIDIA" not in log


def test_health_is_503_while_the_model_loads_from_storage_then_200(vertex_container: Started) -> None:
    statuses = vertex_container.statuses
    assert statuses[-1] == 200 and 503 in statuses, statuses
    assert statuses.index(503) < statuses.index(200), statuses
    log = vertex_container.container.log()
    assert "gs://models/smol" in log, log[-3000:]


def test_a_predict_with_a_chat_and_a_tokenize_instance(vertex_container: Started) -> None:
    reply = requests.post(vertex_container.url(PREDICT), timeout=300, json={"instances": [
        {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
        {"@requestFormat": "tokenize", "content": "Hello world"}]})
    assert reply.status_code == 200, reply.text[:500]
    chat, tokens = reply.json()["predictions"]
    assert chat["choices"][0]["message"]["content"] and 1 <= chat["usage"]["completion_tokens"] <= 8
    assert len(tokens["tokens"]) >= 2 and all(isinstance(token, int) for token in tokens["tokens"])


def test_a_video_instance_is_decoded_where_the_image_has_ffmpeg(tool: str, image: str, vertex_container: Started,
                                                                tmp_path: Path) -> None:
    """An image built with VIDEO=true decodes a video with its own ffmpeg; without (the default), the
    same instance is a 400 that says what is missing, and the log says video is off."""
    video = base64.b64encode(make_video(tmp_path / "clip.mp4", 1)).decode()
    content = [{"type": "text", "text": "What happens?"},
               {"type": "video_url", "video_url": {"url": f"data:video/mp4;base64,{video}"}}]
    reply = requests.post(vertex_container.url(PREDICT), timeout=300, json={"instances": [
        {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": content}], "max_tokens": 4}]})
    assert reply.status_code == 200, reply.text[:500]
    prediction = reply.json()["predictions"][0]
    labels = image_config(tool, image).get("Labels")
    log = vertex_container.container.log()
    if isinstance(labels, dict) and labels.get("vertex-llama.video") == "true":
        assert "error" not in prediction, prediction
        assert prediction["usage"]["prompt_tokens"] > 4 * 16  # 4 frames (1 s at 4 a second) of 16 tokens, and text
        assert "video input: on" in log
    else:
        assert prediction["error"]["code"] == 400 and "no ffmpeg and ffprobe" in prediction["error"]["message"]
        assert "video input: off" in log


def test_grpc_serves_beside_http_as_grpc_ports_would_reach_it(vertex_container: Started) -> None:
    """``upload --grpc-port`` sets LLAMA_ARG_GRPC_PORT: the image has grpcio, health says SERVING, and a
    Predict over gRPC is answered by the same model."""
    import grpc
    from google.protobuf import json_format, struct_pb2
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{vertex_container.grpc_port}") as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=30).status == health_pb2.HealthCheckResponse.SERVING
        predict = channel.unary_unary("/vertex_llama.v1.Llama/Predict",
                                      request_serializer=struct_pb2.Struct.SerializeToString,
                                      response_deserializer=struct_pb2.Struct.FromString)
        body = struct_pb2.Struct()
        body.update({"instances": [{"@requestFormat": "tokenize", "content": "Hello world"}]})
        answer = json_format.MessageToDict(predict(body, timeout=120))
    assert len(answer["predictions"][0]["tokens"]) >= 2


def test_the_web_ui_page_is_served(vertex_container: Started) -> None:
    page = requests.get(vertex_container.url("/"), timeout=30)
    assert page.status_code == 200 and "<title>vertex-llama</title>" in page.text


def test_sigterm_drains_an_in_flight_stream_then_the_container_exits_0(vertex_container: Started) -> None:
    max_tokens = 48
    body = {"messages": MSG, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    stream = requests.post(vertex_container.url("/v1/chat/completions"), json=body, stream=True, timeout=300)
    assert stream.status_code == 200
    lines = stream.iter_lines()
    first = next(line for line in lines if line.startswith(b"data: "))  # the stream is under way
    vertex_container.container.signal(signal.SIGTERM)
    events = [first, *(line for line in lines if line.startswith(b"data: "))]
    assert events[-1] == b"data: [DONE]"
    chunks = [json.loads(event[6:]) for event in events[:-1]]
    finish = [choice["finish_reason"] for chunk in chunks for choice in chunk["choices"] if choice["finish_reason"]]
    assert finish == ["length"]  # every token it asked for, none cut off by the shutdown
    assert vertex_container.container.wait(300) == 0, vertex_container.container.log()[-3000:]
    assert "Shutting down" in vertex_container.container.log() or "exiting" in vertex_container.container.log()


def test_the_embedded_model_serves_without_a_storage_uri(tool: str, image: str, tmp_path: Path) -> None:
    port = free_port()
    container = run_container(tool, image, {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port)},
                              tmp_path / "embedded.log")
    try:
        wait_healthy(container, f"http://127.0.0.1:{port}/health")
        models = requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=30).json()
        assert "SmolLM2" in models["data"][0]["id"]
        reply = requests.post(f"http://127.0.0.1:{port}/predict", timeout=300, json={"instances": [
            {"@requestFormat": "tokenize", "content": "Hello"}]})
        assert reply.status_code == 200 and reply.json()["predictions"][0]["tokens"]
        container.signal(signal.SIGTERM)
        assert container.wait(120) == 0, container.log()[-3000:]
    finally:
        container.remove()
