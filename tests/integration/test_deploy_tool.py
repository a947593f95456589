"""``python -m gcp`` driving the real aiplatform SDK (REST transport, anonymous credentials) against
a local stand-in of the Vertex AI API that records what it receives and forwards predictions to a
real container."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from app.settings import OPTIONS
from gcp.cli import main
from tests.integration.conftest import ROOT, Server, clean_environment, start, storage_emulator
from tests.vertex_standin import RunningStandIn, VertexStandIn

PROJECT = ["--project", "demo", "--region", "us-central1"]


@pytest.fixture
def standin(vertex_server: Server) -> Iterator[RunningStandIn]:
    running = RunningStandIn(VertexStandIn(vertex_server.base))
    yield running
    running.close()


def run_tool(standin: RunningStandIn, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    main([argv[0], *PROJECT, "--api-endpoint", standin.url, "--anonymous", *argv[1:]])
    out = capsys.readouterr().out
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        return out


def upload(standin: RunningStandIn, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    result = run_tool(standin, capsys, "upload", "--image", "us-docker.pkg.dev/demo/repo/vertex-llama:1",
                      "--artifact-uri", "gs://models/smol/", "--ctx-size", "4096", "--parallel", "2",
                      "--env", "LLAMA_ARG_ENDPOINT_METRICS=1")
    assert result["model"].startswith("projects/demo/locations/us-central1/models/")
    return result  # type: ignore[no-any-return]


def test_upload_sends_a_container_spec_the_container_understands(
    standin: RunningStandIn, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    upload(standin, capsys)
    call = standin.standin.calls[-1]
    assert call.method == "POST" and call.path == "/v1/projects/demo/locations/us-central1/models:upload"
    model = call.body["model"]
    spec = model["containerSpec"]
    assert model["artifactUri"] == "gs://models/smol/"
    assert spec["imageUri"] == "us-docker.pkg.dev/demo/repo/vertex-llama:1"
    assert spec["ports"] == [{"containerPort": 8080}]
    assert spec["startupProbe"]["exec"]["command"] == ["python", "-m", "gcp.probe"]
    env = {item["name"]: item["value"] for item in spec["env"]}
    known = {option.env for option in OPTIONS}
    assert set(env) <= known, set(env) - known
    # Start the container the way Vertex would with this spec, and check that it obeys it.
    server = start(tmp_path, [], {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": spec["predictRoute"],
                                  "AIP_HEALTH_ROUTE": spec["healthRoute"], **env})
    try:
        props = requests.get(server.url("/props"), timeout=10).json()
        assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 2048
        assert requests.get(server.url("/metrics"), timeout=10).status_code == 200
        assert requests.get(server.url(spec["healthRoute"]), timeout=10).status_code == 200
        answer = requests.post(server.url(spec["predictRoute"]), timeout=60,
                               json={"instances": [{"@requestFormat": "health"}]}).json()
        assert answer == {"predictions": [{"status": "ok"}]}
        probe = subprocess.run([sys.executable, *spec["startupProbe"]["exec"]["command"][1:]], cwd=ROOT,
                               env=clean_environment({"AIP_HTTP_PORT": str(server.port),
                                                      "AIP_HEALTH_ROUTE": spec["healthRoute"]}))
        assert probe.returncode == 0
    finally:
        server.stop()
    probe = subprocess.run([sys.executable, "-m", "gcp.probe"], cwd=ROOT,
                           env=clean_environment({"AIP_HTTP_PORT": str(server.port)}))
    assert probe.returncode == 1  # nothing listens any more


def test_deploy_predict_and_undeploy(standin: RunningStandIn, capsys: pytest.CaptureFixture[str]) -> None:
    model = upload(standin, capsys)["model"]
    deployed = run_tool(standin, capsys, "deploy", "--model", model.rsplit("/", 1)[1], "--machine-type",
                        "g2-standard-12", "--accelerator-type", "NVIDIA_L4", "--accelerator-count", "1",
                        "--min-replicas", "1", "--max-replicas", "3", "--gpu-target", "70", "--streaming")
    endpoint = deployed["endpoint"]
    calls = standin.standin.calls
    create = next(c for c in calls if c.path.endswith("/endpoints") and c.method == "POST")
    assert create.body["dedicatedEndpointEnabled"] is True
    deploy = next(c for c in calls if c.path.endswith(":deployModel"))
    resources = deploy.body["deployedModel"]["dedicatedResources"]
    assert deploy.body["deployedModel"]["model"] == model
    from google.cloud.aiplatform_v1 import AcceleratorType

    # the REST transport sends enums as numbers ($alt=json;enum-encoding=int)
    assert resources["machineSpec"] == {"machineType": "g2-standard-12",
                                        "acceleratorType": int(AcceleratorType.NVIDIA_L4), "acceleratorCount": 1}
    assert (resources["minReplicaCount"], resources["maxReplicaCount"]) == (1, 3)
    assert resources["autoscalingMetricSpecs"] == [
        {"metricName": "aiplatform.googleapis.com/prediction/online/accelerator/duty_cycle", "target": 70}]
    assert deploy.body["trafficSplit"] == {"0": 100}

    endpoint_id = endpoint.rsplit("/", 1)[1]
    predicted = run_tool(standin, capsys, "predict", "--endpoint", endpoint_id, "--instances",
                         json.dumps([{"@requestFormat": "tokenize", "content": "hello"},
                                     {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}]))
    assert predicted["deployedModelId"] == deployed["deployed_model_id"]
    assert predicted["predictions"][0]["tokens"]
    assert predicted["predictions"][1]["object"] == "chat.completion"
    forwarded = next(c for c in standin.standin.calls if c.path.endswith(":predict"))
    assert forwarded.body["instances"][1]["max_tokens"] == 3.0  # doubles, as protobuf Value carries them

    raw = json.loads(run_tool_raw(standin, capsys, "raw-predict", endpoint_id))
    assert raw["object"] == "chat.completion"
    streamed = run_tool_raw(standin, capsys, "stream-raw-predict", endpoint_id)
    assert streamed.startswith("data: ") and streamed.rstrip().endswith("data: [DONE]")

    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
    main(["invoke", *PROJECT, "--api-endpoint", standin.url, "--anonymous", "--endpoint", endpoint_id,
          "--path", "/v1/chat/completions", "--body", body])
    assert json.loads(capsys.readouterr().out)["object"] == "chat.completion"
    main(["invoke", *PROJECT, "--api-endpoint", standin.url, "--anonymous", "--endpoint", endpoint_id,
          "--path", "/v1/chat/completions", "--body", body, "--stream"])
    assert capsys.readouterr().out.rstrip().endswith("data: [DONE]")
    invoked = [c.path for c in standin.standin.calls if "/invoke/" in c.path]
    assert invoked[0].endswith(f"/endpoints/{endpoint_id}/invoke/v1/chat/completions")

    undeployed = run_tool(standin, capsys, "undeploy", "--endpoint", endpoint_id, "--delete-endpoint")
    assert undeployed["undeployed"] == [deployed["deployed_model_id"]] and undeployed["deleted"] is True
    assert endpoint not in standin.standin.endpoints


def run_tool_raw(standin: RunningStandIn, capsys: pytest.CaptureFixture[str], command: str, endpoint: str) -> Any:
    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
    main([command, *PROJECT, "--api-endpoint", standin.url, "--anonymous", "--endpoint", endpoint, "--body", body])
    return capsys.readouterr().out


def test_dry_run_prints_the_requests_and_sends_nothing(
    standin: RunningStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["deploy", *PROJECT, "--model", "42", "--timeout", "300", "--dry-run", "--accelerator-type", "none",
          "--machine-type", "n2-standard-8", "--cpu-target", "60"])
    printed = [json.loads(block) for block in _json_blocks(capsys.readouterr().out)]
    assert [p["method"] for p in printed] == ["EndpointService.CreateEndpoint", "EndpointService.DeployModel"]
    assert printed[0]["request"]["endpoint"]["dedicatedEndpointEnabled"] is True  # timeout over 60 s
    assert printed[0]["request"]["endpoint"]["clientConnectionConfig"]["inferenceTimeout"] == "300s"
    machine = printed[1]["request"]["deployedModel"]["dedicatedResources"]["machineSpec"]
    assert machine == {"machineType": "n2-standard-8"}
    assert printed[1]["request"]["deployedModel"]["model"] == "projects/demo/locations/us-central1/models/42"
    assert standin.standin.calls == []


def _json_blocks(text: str) -> list[str]:
    blocks, depth, current = [], 0, []
    for line in text.splitlines():
        current.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0 and current:
            blocks.append("\n".join(current))
            current = []
    return [block for block in blocks if block.strip()]


def test_a_failed_call_is_a_clear_error(standin: RunningStandIn, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["predict", *PROJECT, "--api-endpoint", standin.url, "--anonymous", "--endpoint", "404",
              "--instances", "[]"])
    assert caught.value.code == 1
    assert "python -m gcp predict: NotFound" in capsys.readouterr().err


def test_an_invoke_model_has_no_predict_route(standin: RunningStandIn, capsys: pytest.CaptureFixture[str]) -> None:
    run_tool(standin, capsys, "upload", "--image", "img", "--invoke")
    spec = standin.standin.calls[-1].body["model"]["containerSpec"]
    assert spec["invokeRoutePrefix"] == "/*"
    assert "predictRoute" not in spec and spec["healthRoute"] == "/health"


@pytest.mark.parametrize(("kind", "extra", "deadline", "size"), [
    ("shared", [], "55", "1572864"),
    ("dedicated", ["--inference-timeout", "900"], "895", "10485760"),
])
def test_upload_sets_the_limits_of_the_endpoint_kind(
    capsys: pytest.CaptureFixture[str], kind: str, extra: list[str], deadline: str, size: str
) -> None:
    main(["upload", *PROJECT, "--image", "img", "--endpoint-kind", kind, *extra, "--dry-run"])
    printed = json.loads(_json_blocks(capsys.readouterr().out)[0])
    env = {item["name"]: item["value"] for item in printed["request"]["model"]["containerSpec"]["env"]}
    assert env["LLAMA_ARG_PREDICT_DEADLINE"] == deadline and env["LLAMA_ARG_MAX_RESPONSE_BYTES"] == size
    names = {option.env for option in OPTIONS}
    assert {"LLAMA_ARG_PREDICT_DEADLINE", "LLAMA_ARG_MAX_RESPONSE_BYTES"} <= names  # the container reads them
    main(["upload", *PROJECT, "--image", "img", "--endpoint-kind", kind, "--env", "LLAMA_ARG_PREDICT_DEADLINE=30",
          "--dry-run"])
    printed = json.loads(_json_blocks(capsys.readouterr().out)[0])
    env = {item["name"]: item["value"] for item in printed["request"]["model"]["containerSpec"]["env"]}
    assert env["LLAMA_ARG_PREDICT_DEADLINE"] == "30"  # --env wins


def test_deploy_warns_when_the_model_was_uploaded_for_the_other_endpoint_kind(
    standin: RunningStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = run_tool(standin, capsys, "upload", "--image", "img", "--endpoint-kind", "shared")["model"]
    main(["deploy", *PROJECT, "--api-endpoint", standin.url, "--anonymous", "--model", shared.rsplit("/", 1)[1],
          "--accelerator-type", "none", "--machine-type", "n2-standard-8", "--timeout", "600"])
    warned = capsys.readouterr().err
    assert "uploaded for a shared endpoint" in warned and "--endpoint-kind dedicated" in warned
    dedicated = run_tool(standin, capsys, "upload", "--image", "img", "--endpoint-kind", "dedicated")["model"]
    main(["deploy", *PROJECT, "--api-endpoint", standin.url, "--anonymous", "--model", dedicated.rsplit("/", 1)[1],
          "--accelerator-type", "none", "--machine-type", "n2-standard-8"])
    warned = capsys.readouterr().err
    assert "this shared endpoint cuts requests at 60 s" in warned
    main(["deploy", *PROJECT, "--api-endpoint", standin.url, "--anonymous", "--model", shared.rsplit("/", 1)[1],
          "--accelerator-type", "none", "--machine-type", "n2-standard-8"])
    assert "warning" not in capsys.readouterr().err  # a shared model on a shared endpoint fits


BATCH_ROWS: list[dict[str, Any]] = [
    {"custom_id": "chat-1", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "any", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}},
    {"custom_id": "completion-2", "method": "POST", "url": "/v1/completions",
     "body": {"prompt": "Once", "max_tokens": 4}},
    {"custom_id": "embedding-3", "method": "POST", "url": "/embedding", "body": {"content": "hello"}},
    {"custom_id": "no-route-4", "method": "POST", "url": "/v1/nothing", "body": {}},
    {"custom_id": "bad-body-5", "url": "/v1/chat/completions", "body": {"messages": []}},
]


def test_batch_predict_runs_openai_batch_rows_from_a_bucket(
    standin: RunningStandIn, capsys: pytest.CaptureFixture[str], vertex_server: Server
) -> None:
    with storage_emulator():
        from google.cloud import storage

        client = storage.Client()
        bucket = client.create_bucket("batch")
        bucket.blob("in/rows.jsonl").upload_from_string("".join(json.dumps(row) + "\n" for row in BATCH_ROWS))
        model = upload(standin, capsys)["model"]
        summary = run_tool(standin, capsys, "batch-predict", "--model", model, "--input", "gs://batch/in/rows.jsonl",
                           "--output", "gs://batch/out", "--batch-size", "2", "--parameters", '{"temperature": 0}',
                           "--service-account", "batch@demo.iam.gserviceaccount.com", "--machine-type",
                           "n1-standard-8", "--accelerator-type", "none", "--wait", "--poll-seconds", "0.05")
        # the job spec the tool sent
        job = next(call.body for call in standin.standin.calls if call.path.endswith("/batchPredictionJobs"))
        assert job["model"] == model
        assert job["inputConfig"] == {"instancesFormat": "jsonl", "gcsSource": {"uris": ["gs://batch/in/rows.jsonl"]}}
        assert job["outputConfig"] == {"predictionsFormat": "jsonl",
                                       "gcsDestination": {"outputUriPrefix": "gs://batch/out"}}
        assert job["dedicatedResources"] == {"machineSpec": {"machineType": "n1-standard-8"},
                                             "startingReplicaCount": 1, "maxReplicaCount": 1}
        assert job["manualBatchTuningParameters"] == {"batchSize": 2}
        assert job["serviceAccount"] == "batch@demo.iam.gserviceaccount.com"
        # what the batch workers sent the container: instances of at most 2 rows, in order, with the parameters
        bodies = standin.standin.batch_bodies
        assert [body["instances"] for body in bodies] == [BATCH_ROWS[0:2], BATCH_ROWS[2:4], BATCH_ROWS[4:5]]
        assert all(body["parameters"] == {"temperature": 0} for body in bodies)
        # the summary --wait prints, and the output it names
        assert summary["state"] == "JOB_STATE_SUCCEEDED" and summary["error"] is None
        assert (summary["rows"], summary["successful"], summary["failed"]) == (5, 5, 0)
        output = summary["output"].removeprefix("gs://batch/") + "/prediction.results-00000-of-00001"
        lines = [json.loads(line) for line in bucket.blob(output).download_as_text().splitlines()]
        client.close()
    assert [line["instance"] for line in lines] == BATCH_ROWS
    answers = [line["prediction"] for line in lines]
    assert [answer["custom_id"] for answer in answers] == [row["custom_id"] for row in BATCH_ROWS]
    chat, completion, embedding, no_route, bad_body = answers
    assert chat["response"]["status_code"] == 200 and chat["error"] is None
    assert chat["response"]["body"]["object"] == "chat.completion"
    assert chat["response"]["body"]["usage"]["completion_tokens"] <= 4
    assert completion["response"]["body"]["object"] == "text_completion"
    direct = requests.post(vertex_server.url("/embedding"), json={"content": "hello", "temperature": 0}, timeout=60)
    assert embedding["response"]["status_code"] == direct.status_code == 200
    assert embedding["response"]["body"] == direct.json()  # a row is answered as its route answers
    assert no_route["response"] is None and no_route["error"]["code"] == "invalid_url"
    assert bad_body["response"]["status_code"] == 400 and "messages" in bad_body["response"]["body"]["error"]["message"]


def test_batch_predict_refuses_a_batch_the_container_would_not_take(
    standin: RunningStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        run_tool(standin, capsys, "batch-predict", "--model", "1", "--input", "gs://b/rows.jsonl", "--output",
                 "gs://b/out", "--batch-size", "129")
    assert exited.value.code == 2
    assert "--batch-size 129: the container takes 1 to 128 instances a request" in capsys.readouterr().err
    assert not standin.standin.calls
