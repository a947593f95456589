"""``python -m gcp`` driving the real aiplatform SDK (REST transport, anonymous credentials) against
a local stand-in of the Vertex AI API that records what it receives and forwards predictions to a
real container."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from app.config.settings import OPTIONS, parse_settings
from gcp import operations
from gcp.cli import main
from tests.integration.conftest import ROOT, Server, clean_environment, start, storage_emulator
from tests.vertex_standin import RunningStandIn, VertexStandIn

PROJECT = ["--project", "demo", "--region", "us-central1"]


@pytest.fixture
def standin(vertex_server: Server) -> Iterator[RunningStandIn]:
    running = RunningStandIn(VertexStandIn(vertex_server.base))
    yield running
    running.close()


def stand_in_flags(standin: RunningStandIn, command: str) -> list[str]:
    """The stand-in for every Google API the command calls (deploy also reads Cloud Logging)."""
    logging = ["--logging-endpoint", standin.url] if command == "deploy" else []
    return [*PROJECT, "--api-endpoint", standin.url, "--anonymous", *logging]


def run_tool(standin: RunningStandIn, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    main([argv[0], *stand_in_flags(standin, argv[0]), *argv[1:]])
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
    assert spec["healthProbe"]["httpGet"] == {"path": "/health", "port": 8080}
    assert spec["livenessProbe"]["httpGet"] == {"path": "/live", "port": 8080}
    assert spec["livenessProbe"]["failureThreshold"] == 3 and spec["livenessProbe"]["periodSeconds"] == 30
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
        for probe_spec in (spec["healthProbe"], spec["livenessProbe"]):  # what the two HTTP probes ask
            assert requests.get(server.url(probe_spec["httpGet"]["path"]), timeout=10).status_code == 200
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


def test_upload_opens_the_grpc_port_and_sets_model_gardens_answer_shape(capsys: pytest.CaptureFixture[str]) -> None:
    main(["upload", *PROJECT, "--image", "img", "--grpc-port", "8081", "--predictions-format", "model-garden",
          "--dry-run"])
    spec = json.loads(_json_blocks(capsys.readouterr().out)[0])["request"]["model"]["containerSpec"]
    env = {item["name"]: item["value"] for item in spec["env"]}
    assert spec["grpcPorts"] == [{"containerPort": 8081}] and spec["ports"] == [{"containerPort": 8080}]
    assert env["LLAMA_ARG_GRPC_PORT"] == "8081" and env["LLAMA_ARG_PREDICTIONS_FORMAT"] == "model-garden"
    settings = parse_settings([], env)  # the container takes both
    assert settings.grpc_port == 8081 and settings.predictions_format == "model-garden"
    main(["upload", *PROJECT, "--image", "img", "--env", "LLAMA_ARG_GRPC_PORT=9000", "--dry-run"])
    spec = json.loads(_json_blocks(capsys.readouterr().out)[0])["request"]["model"]["containerSpec"]
    assert spec["grpcPorts"] == [{"containerPort": 9000}]  # the port is read from the container's setting


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
    {"custom_id": "bad-body-5", "url": "/v1/chat/completions", "body": {"messages": "none"}},
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


@pytest.fixture
def simulated_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The deploy wait's clock, advanced by its sleeps: many minutes pass at once."""
    now = [0.0]
    monkeypatch.setattr(operations, "CLOCK", lambda: now[0])
    monkeypatch.setattr(operations, "SLEEP", lambda seconds: now.__setitem__(0, now[0] + seconds))
    return now


def tool(standin: RunningStandIn, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    main([argv[0], *stand_in_flags(standin, argv[0]), *argv[1:]])
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_a_deploy_that_outlasts_15_minutes_still_finishes_and_prints_the_endpoint_first(
    standin: RunningStandIn, capsys: pytest.CaptureFixture[str], simulated_clock: list[float]
) -> None:
    model = upload(standin, capsys)["model"]
    standin.standin.deploy_polls = 64  # 64 polls, 15 s apart: 16 minutes
    out, err = tool(standin, capsys, "deploy", "--model", model, "--machine-type", "n1-standard-8",
                    "--accelerator-type", "none")
    assert simulated_clock[0] >= 15 * 60
    result = json.loads(out)
    endpoint = result["endpoint"]
    assert result["deployed_model_id"] and endpoint in err
    assert err.index(endpoint) < err.index("deploying (")  # the endpoint is told before the wait
    assert result["console"] == ("https://console.cloud.google.com/vertex-ai/online-prediction/locations/"
                                 f"us-central1/endpoints/{endpoint.rsplit('/', 1)[-1]}?project=demo")
    deployed = next(c.body for c in standin.standin.calls if c.path.endswith(":deployModel"))["deployedModel"]
    assert deployed["displayName"] == "vertex-llama"  # the model's own, not the endpoint's
    # the container's log lines, tailed from Cloud Logging while waiting: each once, in order
    written = [entry["jsonPayload"]["message"] for entry in standin.standin.log_entries]
    assert len(written) == 64
    shown = [line.split("] ", 1)[1] for line in err.splitlines() if line.startswith("[")]
    assert shown == written
    endpoint_id = endpoint.rsplit("/", 1)[-1]
    assert all(f'resource.labels.endpoint_id="{endpoint_id}"' in query["filter"]
               for query in standin.standin.log_queries)
    created = next(c.body for c in standin.standin.calls if c.path.endswith("/endpoints") and c.method == "POST")
    assert "clientConnectionConfig" not in created  # no --timeout: Vertex AI's default


def test_no_logs_turns_the_tail_off(standin: RunningStandIn, capsys: pytest.CaptureFixture[str],
                                     simulated_clock: list[float]) -> None:
    model = upload(standin, capsys)["model"]
    standin.standin.deploy_polls = 3
    tool(standin, capsys, "deploy", "--model", model, "--accelerator-type", "none", "--no-logs")
    assert standin.standin.log_entries and not standin.standin.log_queries


def test_a_deploy_past_its_deployment_timeout_exits_with_the_command_to_follow_it(
    standin: RunningStandIn, capsys: pytest.CaptureFixture[str], simulated_clock: list[float]
) -> None:
    model = run_tool(standin, capsys, "upload", "--image", "img", "--deployment-timeout", "600")["model"]
    standin.standin.deploy_polls = 1000
    with pytest.raises(SystemExit) as exited:
        tool(standin, capsys, "deploy", "--model", model, "--accelerator-type", "none", "--no-logs")
    assert exited.value.code == 3
    err = capsys.readouterr().err
    assert simulated_clock[0] == pytest.approx(600 + operations.PROVISIONING_MARGIN_S, abs=15)
    endpoint = next(iter(standin.standin.endpoints))
    follow = f"python -m gcp status --project demo --region us-central1 --endpoint {endpoint.rsplit('/', 1)[-1]}"
    assert follow in err and "Traceback" not in err
    state = run_tool(standin, capsys, "status", "--endpoint", endpoint.rsplit("/", 1)[-1])
    assert state["endpoint"] == endpoint and state["deployed_models"] == []
    assert [op["name"] for op in state["operations_in_flight"]] == list(standin.standin.running)


def test_deploy_flags_for_real_deployments(standin: RunningStandIn, capsys: pytest.CaptureFixture[str]) -> None:
    requests_sent = [json.loads(part) for part in run_tool(
        standin, capsys, "deploy", "--model", "7", "--spot", "--service-account", "sa@demo.iam.gserviceaccount.com",
        "--min-replicas", "2", "--max-replicas", "4", "--required-replica-count", "1", "--autoscale-metric", "queue",
        "--autoscale-target", "4", "--timeout", "1200", "--dry-run").replace("}\n{", "}\n\n{").split("\n\n")]
    endpoint = requests_sent[0]["request"]["endpoint"]
    assert endpoint["dedicatedEndpointEnabled"] is True
    assert endpoint["clientConnectionConfig"] == {"inferenceTimeout": "1200s"}
    deployed = requests_sent[1]["request"]["deployedModel"]
    assert deployed["serviceAccount"] == "sa@demo.iam.gserviceaccount.com"
    resources = deployed["dedicatedResources"]
    assert resources["spot"] is True and resources["requiredReplicaCount"] == 1
    assert resources["autoscalingMetricSpecs"] == [
        {"metricName": "prometheus.googleapis.com/vertex_vllm_num_requests_waiting", "target": 4}]
    streaming = run_tool(standin, capsys, "deploy", "--model", "7", "--streaming", "--dry-run")
    assert "clientConnectionConfig" not in streaming and '"dedicatedEndpointEnabled": true' in streaming
    for bad, message in ((["--timeout", "4000"], "--timeout 4000: an inference timeout is 1 to 3600 seconds"),
                         (["--required-replica-count", "3"], "--required-replica-count must be at least 1")):
        with pytest.raises(SystemExit) as exited:
            run_tool(standin, capsys, "deploy", "--model", "7", *bad, "--dry-run")
        assert exited.value.code == 2 and message in capsys.readouterr().err


def test_streaming_or_invoke_refuse_a_shared_endpoint(standin: RunningStandIn, capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    model = upload(standin, capsys)["model"]
    shared = run_tool(standin, capsys, "deploy", "--model", model, "--accelerator-type", "none")["endpoint"]
    with pytest.raises(SystemExit) as exited:
        tool(standin, capsys, "deploy", "--model", model, "--endpoint", shared, "--streaming")
    assert exited.value.code == 2
    assert f"--streaming (streamRawPredict) needs a dedicated endpoint, and {shared} is a shared one" in (
        capsys.readouterr().err)
    invoke_model = run_tool(standin, capsys, "upload", "--image", "img", "--invoke")["model"]
    with pytest.raises(SystemExit):
        tool(standin, capsys, "deploy", "--model", invoke_model, "--endpoint", shared)
    assert "invoke routes (upload --invoke) needs a dedicated endpoint" in capsys.readouterr().err
    created = run_tool(standin, capsys, "deploy", "--model", invoke_model, "--accelerator-type", "none")
    assert standin.standin.endpoints[created["endpoint"]]["dedicatedEndpointEnabled"] is True


def test_the_startup_probe_waits_as_long_as_the_deployment_timeout(
    standin: RunningStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    run_tool(standin, capsys, "upload", "--image", "img", "--deployment-timeout", "7200")
    probe = standin.standin.calls[-1].body["model"]["containerSpec"]["startupProbe"]
    assert int(probe["periodSeconds"]) * int(probe["failureThreshold"]) == 7200


def test_every_subcommand_lists_its_flags_with_their_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    from gcp.parser import build_parser

    subparsers = build_parser()._subparsers
    assert subparsers is not None
    commands: dict[str, argparse.ArgumentParser] = subparsers._group_actions[0].choices  # type: ignore[assignment]
    for name, parser in commands.items():
        text = parser.format_help()
        for action in parser._actions:
            if action.option_strings and action.default not in (None, False, [], "==SUPPRESS=="):
                assert f"(default: {action.default})" in " ".join(text.split()), (name, action.dest)


def test_a_new_version_rolls_out_as_a_canary_rolls_back_and_the_old_one_is_undeployed(
    standin: RunningStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    first = upload(standin, capsys)
    assert first["model_version_id"] == "1"
    old = run_tool(standin, capsys, "deploy", "--model", first["model"], "--accelerator-type", "none")
    endpoint = old["endpoint"]
    second = run_tool(standin, capsys, "upload", "--image", "us-docker.pkg.dev/demo/repo/vertex-llama:2",
                      "--parent-model", first["model"].rsplit("/", 1)[-1])
    assert second == {"model": first["model"], "model_version_id": "2"}
    assert standin.standin.calls[-1].body["parentModel"] == first["model"]
    canary = run_tool(standin, capsys, "deploy", "--model", f"{first['model']}@2", "--endpoint", endpoint,
                      "--accelerator-type", "none", "--traffic", "10")
    new_id, old_id = canary["deployed_model_id"], old["deployed_model_id"]
    sent = next(c for c in reversed(standin.standin.calls) if c.path.endswith(":deployModel"))
    assert sent.body["trafficSplit"] == {"0": 10, old_id: 90}
    assert sent.body["deployedModel"]["model"].endswith("@2")
    assert standin.standin.endpoints[endpoint]["trafficSplit"] == {new_id: 10, old_id: 90}
    shifted = run_tool(standin, capsys, "traffic", "--endpoint", endpoint, "--split", f"{new_id}=100")
    assert shifted["traffic_split"] == {new_id: 100, old_id: 0}
    back = run_tool(standin, capsys, "rollback", "--endpoint", endpoint)
    assert back["traffic_split"] == {old_id: 100, new_id: 0}
    for bad, message in ((f"{new_id}=60", "add up to 60"), ("999=100", "999 is not deployed on this endpoint")):
        with pytest.raises(SystemExit) as exited:
            run_tool(standin, capsys, "traffic", "--endpoint", endpoint, "--split", bad)
        assert exited.value.code == 2 and message in capsys.readouterr().err
    run_tool(standin, capsys, "traffic", "--endpoint", endpoint, "--split", f"{new_id}=100")
    # undeploying a model moves its traffic to the ones that stay (Vertex refuses a model with traffic)
    run_tool(standin, capsys, "undeploy", "--endpoint", endpoint, "--deployed-model-id", new_id)
    assert standin.standin.endpoints[endpoint]["trafficSplit"] == {old_id: 100}
    state = run_tool(standin, capsys, "status", "--endpoint", endpoint)
    assert [m["id"] for m in state["deployed_models"]] == [old_id]
    assert state["deployed_models"][0]["traffic_percent"] == 100


def test_traffic_shares_and_scale_to_zero() -> None:
    from gcp.deploy import DeploySpec, DeploySpecError
    from gcp.rollout import share_out, split_with_new, split_without

    assert share_out(90, {"a": 50, "b": 50}) == {"a": 45, "b": 45}
    assert share_out(100, {"a": 1, "b": 1, "c": 1}) == {"a": 34, "b": 33, "c": 33}
    assert sum(share_out(97, {"a": 3, "b": 7, "c": 0}).values()) == 97
    assert share_out(100, {"a": 0, "b": 0}) == {"a": 50, "b": 50}
    assert split_with_new({"a": 70, "b": 30}, ["a", "b"], 20) == {"0": 20, "a": 56, "b": 24}
    assert split_without({"a": 70, "b": 30}, ["a", "b"], "a") == {"b": 100}
    assert split_without({"a": 100}, ["a"], "a") == {}
    with pytest.raises(DeploySpecError, match="scale to zero is a preview of Vertex AI's v1beta1 API"):
        DeploySpec(model="1", min_replicas=0).checked()
