"""Vertex AI's other ways in, through the stand-in of its API with the clients users call them with:
the OpenAI-compatible door (``openai.OpenAI(base_url=".../v1beta1/<endpoint>")``) and Model Garden's
answer shape (``--predictions-format model-garden``: one chat instance answered as the object, which the
aiplatform SDK hands back as it is on a dedicated endpoint)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests
from google.auth.credentials import AnonymousCredentials

from tests.integration.conftest import Server, start
from tests.vertex_standin import RunningStandIn, VertexStandIn

ENDPOINT = "projects/demo/locations/us-central1/endpoints/77"
CHAT = {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": "Say hi"}],
        "max_tokens": 4, "temperature": 0}


def standin_for(server: Server) -> RunningStandIn:
    running = RunningStandIn(VertexStandIn(server.base))
    running.standin.endpoints[ENDPOINT] = {
        "name": ENDPOINT, "displayName": "demo", "deployedModels": [{"id": "5", "model": "m"}],
        "dedicatedEndpointEnabled": True, "dedicatedEndpointDns": "77.us-central1-1234.prediction.vertexai.goog"}
    return running


@pytest.fixture
def standin(vertex_server: Server) -> Iterator[RunningStandIn]:
    running = standin_for(vertex_server)
    yield running
    running.close()


@pytest.fixture(scope="module")
def model_garden_server(server_dir: Path) -> Iterator[Server]:
    server = start(server_dir, ["-np", "2", "-c", "2048"],
                   {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "/predict",
                    "LLAMA_ARG_PREDICTIONS_FORMAT": "model-garden"})
    yield server
    assert server.stop() == 0, server.log()


def openai_client(standin: RunningStandIn) -> openai.OpenAI:
    """As Google's guide sets it up: the endpoint's v1beta1 name as the base URL, a token as the key."""
    return openai.OpenAI(base_url=f"{standin.url}/v1beta1/{ENDPOINT}", api_key="ya29.access-token", max_retries=0)


def test_the_openai_sdk_through_vertex_ai_chat_completions(standin: RunningStandIn) -> None:
    client = openai_client(standin)
    answer = client.chat.completions.create(model="", messages=[{"role": "user", "content": "Say hi"}],
                                            max_tokens=4, temperature=0)
    assert answer.object == "chat.completion" and answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.completion_tokens <= 4
    stream = client.chat.completions.create(model="", messages=[{"role": "user", "content": "Say hi"}],
                                            max_tokens=4, temperature=0, stream=True)
    chunks = list(stream)
    assert chunks and all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer.choices[0].message.content
    sent = [call for call in standin.standin.calls if call.path.endswith("/chat/completions")]
    assert [call.path for call in sent] == [f"/v1beta1/{ENDPOINT}/chat/completions"] * 2
    assert sent[1].body["stream"] is True


def test_a_bad_body_through_the_openai_door_is_the_servers_400(standin: RunningStandIn) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client(standin).chat.completions.create(model="", messages="nope", max_tokens=4)  # type: ignore[arg-type]
    assert "messages" in str(raised.value)


def test_llama_server_format_answers_a_list_of_one(vertex_server: Server) -> None:
    answer = requests.post(vertex_server.url("/predict"), json={"instances": [CHAT]}, timeout=120).json()
    assert isinstance(answer["predictions"], list) and answer["predictions"][0]["object"] == "chat.completion"


def test_model_garden_format_answers_one_chat_instance_as_the_object(model_garden_server: Server) -> None:
    def predict(body: Any) -> requests.Response:
        return requests.post(model_garden_server.url("/predict"), json=body, timeout=120)

    single = predict({"instances": [CHAT]}).json()["predictions"]
    assert single["object"] == "chat.completion" and single["choices"][0]["message"]["content"]
    by_shape = predict({"instances": [{"messages": CHAT["messages"]}], "parameters": {"max_tokens": 4}}).json()
    assert by_shape["predictions"]["object"] == "chat.completion"
    assert by_shape["predictions"]["usage"]["completion_tokens"] <= 4  # parameters still merge in
    # Everything else keeps the list: two instances, and one instance for another route.
    two = predict({"instances": [CHAT, CHAT]}).json()["predictions"]
    assert [p["object"] for p in two] == ["chat.completion", "chat.completion"]
    tokens = predict({"instances": [{"@requestFormat": "tokenize", "content": "hi"}]}).json()["predictions"]
    assert isinstance(tokens, list) and tokens[0]["tokens"]
    # A failed chat instance is the request's error, status and body, not a prediction to read choices from.
    failed = predict({"instances": [{**CHAT, "messages": "wrong"}]})
    assert failed.status_code == 400 and "messages" in failed.json()["error"]["message"]


class _ToStandIn(requests.Session):
    """The SDK posts to https://<dedicatedEndpointDns>; this sends those posts to the stand-in."""

    def __init__(self, standin_url: str, dns: str) -> None:
        super().__init__()
        self._from, self._to = f"https://{dns}", standin_url

    def post(self, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        return super().post(str(url).replace(self._from, self._to), *args, **kwargs)


def test_the_aiplatform_sdk_reads_choices_from_predictions(model_garden_server: Server) -> None:
    from google.cloud import aiplatform

    running = standin_for(model_garden_server)
    try:
        aiplatform.init(project="demo", location="us-central1", api_endpoint=running.url,
                        credentials=AnonymousCredentials(), api_transport="rest")  # type: ignore[no-untyped-call]
        endpoint = aiplatform.Endpoint(ENDPOINT)
        endpoint.authorized_session = _ToStandIn(running.url, str(endpoint.dedicated_endpoint_dns))  # type: ignore[assignment]
        response = endpoint.predict(instances=[CHAT], use_dedicated_endpoint=True)
        predictions: Any = response.predictions
        # The line Model Garden's users write, unchanged:
        assert predictions["choices"][0]["message"]["content"]
        assert response.deployed_model_id == "5"
    finally:
        running.close()
