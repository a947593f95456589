"""A local stand-in for the Vertex AI REST API (v1) that records every request it receives.

It answers model upload, endpoint create/get/delete, deploy and undeploy with finished operations,
and forwards :predict, :rawPredict and :streamRawPredict to a real container, as Vertex does; the
OpenAI-compatible door (``POST /v1beta1/.../endpoints/ID/chat/completions``, PredictionService.ChatCompletions:
an ``HttpBody`` in, a stream of ``HttpBody`` out, as StreamRawPredict) forwards the body as it is. A batch
prediction job runs as Vertex's batch workers run it: the JSONL input is read from Cloud Storage (the
emulator), sent to the container's predict route in requests of ``batchSize`` instances with the
job's ``modelParameters``, and the predictions are written back as ``{"instance", "prediction"}``
lines.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests
from flask import Flask, Response, request
from werkzeug.serving import make_server

TYPE = "type.googleapis.com/google.cloud.aiplatform.v1."


@dataclass
class Recorded:
    method: str
    path: str
    body: Any


@dataclass
class VertexStandIn:
    container: str  # base URL of the container that serves the deployed model
    calls: list[Recorded] = field(default_factory=list)
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1000))
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    batch_bodies: list[dict[str, Any]] = field(default_factory=list)  # what the batch workers sent
    deploy_polls: int = 0  # how many polls a deployment stays running (0: done at once)
    running: dict[str, dict[str, Any]] = field(default_factory=dict)  # operations in flight, by name
    log_entries: list[dict[str, Any]] = field(default_factory=list)  # Cloud Logging's, as the container wrote them
    log_queries: list[dict[str, Any]] = field(default_factory=list)
    grants: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (principal, bucket) -> permissions
    quota_infos: list[dict[str, Any]] = field(default_factory=list)  # Cloud Quotas API, served 2 a page
    grpc_target: str | None = None  # host:port of the container's grpcPorts, for :directRawPredict
    grpc_metadata: tuple[tuple[str, str], ...] = ()  # what a test's container needs on each call (its API key)

    def app(self) -> Flask:
        app = Flask("vertex-standin")

        @app.route("/v2/entries:list", methods=["POST"])  # Cloud Logging
        def entries() -> Response:
            query = request.get_json()
            self.log_queries.append(query)
            return _json({"entries": [entry for entry in self.log_entries if _matches(entry, query["filter"])]})

        @app.route("/v1beta1/<path:rest>", methods=["POST"])  # the OpenAI-compatible door (ChatCompletions)
        def chat_completions(rest: str) -> Response:
            body = request.get_json(silent=True)
            self.calls.append(Recorded(request.method, request.path, body))
            endpoint = re.match(r"(.*/endpoints/[^/]+)/chat/completions$", rest)
            if endpoint is None or endpoint.group(1) not in self.endpoints:
                return _json({"error": {"code": 404, "message": f"{rest} not found", "status": "NOT_FOUND"}}, 404)
            return self.forward("streamRawPredict", self.endpoints[endpoint.group(1)], body)

        @app.route("/v1/<path:rest>", methods=["GET", "POST", "DELETE", "PATCH"])
        @app.route("/ui/<path:rest>", methods=["GET"])  # the SDK's REST transport polls operations here
        def api(rest: str) -> Response:
            body = request.get_json(silent=True)
            self.calls.append(Recorded(request.method, request.path, body))
            return self.dispatch(request.method, rest, body)

        return app

    def operation(self, parent: str, kind: str, payload: dict[str, Any]) -> Response:
        name = f"{parent}/operations/{next(self.ids)}"
        return _json({"name": name, "done": True, "response": {"@type": TYPE + kind, **payload}})

    def troubleshoot(self, body: dict[str, Any]) -> Response:
        """The IAM Policy Troubleshooter's answer for one principal, permission and bucket."""
        access = body["accessTuple"]
        bucket = access["fullResourceName"].rsplit("/buckets/", 1)[-1]
        granted = access["permission"] in self.grants.get((access["principal"], bucket), set())
        return _json({"access": "GRANTED" if granted else "NOT_GRANTED"})

    def quotas_page(self, token: str) -> Response:
        start = int(token or 0)
        page: dict[str, Any] = {"quotaInfos": self.quota_infos[start:start + 2]}
        if start + 2 < len(self.quota_infos):
            page["nextPageToken"] = str(start + 2)
        return _json(page)

    def dispatch(self, method: str, rest: str, body: Any) -> Response:
        if rest == "iam:troubleshoot":
            return self.troubleshoot(body)
        if rest.endswith("/services/aiplatform.googleapis.com/quotaInfos"):
            return self.quotas_page(request.args.get("pageToken", ""))
        parent_match = re.match(r"(projects/[^/]+/locations/[^/]+)", rest)
        parent = parent_match.group(1) if parent_match else ""
        if rest.endswith("/models:upload"):
            parent_model = body.get("parentModel")
            if parent_model and parent_model.split("projects/", 1)[-1] not in {n.split("projects/", 1)[-1]
                                                                                 for n in self.models}:
                return _json({"error": {"code": 404, "message": f"{parent_model} not found"}}, 404)
            name = parent_model or f"{parent}/models/{next(self.ids)}"
            version = str(int(self.models.get(name, {}).get("versionId", "0")) + 1)
            self.models[name] = self.models[f"{name}@{version}"] = {**body["model"], "name": name,
                                                                     "versionId": version}
            return self.operation(parent, "UploadModelResponse", {"model": name, "modelVersionId": version})
        if method == "GET" and re.search(r"/models/[^/:]+$", rest):
            if rest not in self.models:
                return _json({"error": {"code": 404, "message": f"{rest} not found", "status": "NOT_FOUND"}}, 404)
            return _json(self.models[rest])
        if method == "POST" and rest.endswith("/endpoints"):
            name = f"{parent}/endpoints/{next(self.ids)}"
            endpoint = {**body, "name": name, "deployedModels": []}
            self.endpoints[name] = endpoint
            return self.operation(parent, "Endpoint", endpoint)
        if method == "POST" and rest.endswith("/batchPredictionJobs"):
            name = f"{parent}/batchPredictionJobs/{next(self.ids)}"
            job = {**body, "name": name, "state": "JOB_STATE_PENDING"}
            self.jobs[name] = job
            threading.Thread(target=self.run_batch_job, args=(job,), daemon=True).start()
            return _json(job)
        if method == "GET" and rest in self.jobs:
            return _json(self.jobs[rest])
        if method == "GET" and rest in self.running:
            return _json(self.poll(rest))
        listed = re.match(r"(.*/endpoints/[^/:]+)/operations$", rest)
        if method == "GET" and listed:
            return _json({"operations": [item["operation"] for item in self.running.values()
                                         if item["operation"]["name"].startswith(listed.group(1) + "/")]})
        invoked = re.match(r"(.*/endpoints/[^/:]+)/invoke(/.*)$", rest)
        if invoked and invoked.group(1) in self.endpoints:
            upstream = requests.post(self.container + invoked.group(2), json=body, stream=True, timeout=120)
            return Response(upstream.iter_content(chunk_size=None), status=upstream.status_code,
                            content_type=upstream.headers["Content-Type"])
        action = re.match(r"(.*/endpoints/[^/:]+)(?::(\w+))?$", rest)
        if action is None:
            return _json({"error": {"code": 404, "message": "not found"}}, 404)
        name, verb = action.group(1), action.group(2)
        if name not in self.endpoints:
            return _json({"error": {"code": 404, "message": f"{name} not found", "status": "NOT_FOUND"}}, 404)
        endpoint = self.endpoints[name]
        if verb is None and method == "GET":
            return _json(endpoint)
        if verb is None and method == "PATCH":
            return self.set_traffic(endpoint, body["trafficSplit"]) or _json(endpoint)
        if verb is None and method == "DELETE":
            del self.endpoints[name]
            return _json({"name": f"{parent}/operations/{next(self.ids)}", "done": True,
                          "response": {"@type": "type.googleapis.com/google.protobuf.Empty"}})
        if verb == "deployModel":
            deployed = {**body["deployedModel"], "id": str(next(self.ids)), "createTime": _now()}
            split = {deployed["id"] if key == "0" else key: value
                     for key, value in body.get("trafficSplit", {"0": 100}).items()}
            refused = self.set_traffic(endpoint, split, also=deployed["id"])
            if refused:
                return refused
            if not self.deploy_polls:
                endpoint["deployedModels"].append(deployed)
                return self.operation(parent, "DeployModelResponse", {"deployedModel": deployed})
            operation: dict[str, Any] = {"name": f"{name}/operations/{next(self.ids)}", "done": False}
            self.running[operation["name"]] = {"operation": operation, "polls": self.deploy_polls,
                                               "endpoint": endpoint, "deployed": deployed}
            return _json(operation)
        if verb == "undeployModel":
            removed = body["deployedModelId"]
            split = body.get("trafficSplit", endpoint.get("trafficSplit", {}))
            staying = [m for m in endpoint["deployedModels"] if m["id"] != removed]
            if staying and int(split.get(removed, 0)):  # as Vertex AI: a model with traffic stays
                return _json({"error": {"code": 400, "status": "FAILED_PRECONDITION",
                                        "message": f"deployed model {removed} still has traffic"}}, 400)
            endpoint["deployedModels"] = staying
            endpoint["trafficSplit"] = {k: v for k, v in split.items() if k != removed} if staying else {}
            return self.operation(parent, "UndeployModelResponse", {})
        return self.forward(verb, endpoint, body)

    def forward(self, verb: str, endpoint: dict[str, Any], body: Any) -> Response:
        deployed = endpoint["deployedModels"]
        if not deployed:
            return _json({"error": {"code": 400, "message": "no model deployed"}}, 400)
        if verb == "predict":
            answer = requests.post(self.container + "/predict", json=body, timeout=120).json()
            return _json({**answer, "deployedModelId": deployed[0]["id"]})
        raw = json.dumps(body).encode()  # raw predictions carry the body as it is
        headers = {"Content-Type": "application/json"}
        if verb == "rawPredict":
            answer = requests.post(self.container + "/predict", data=raw, headers=headers, timeout=120)
            return Response(answer.content, status=answer.status_code, content_type=answer.headers["Content-Type"])
        if verb == "directRawPredict":
            return self.direct_raw_predict(body)
        if verb == "streamRawPredict":
            upstream = requests.post(self.container + "/predict", data=raw, headers=headers, stream=True, timeout=120)

            return Response(upstream.iter_content(chunk_size=None), status=upstream.status_code,
                            content_type=upstream.headers["Content-Type"])
        return _json({"error": {"code": 404, "message": f"unknown verb {verb}"}}, 404)


    def direct_raw_predict(self, body: dict[str, Any]) -> Response:
        """As Vertex AI does for a model with grpcPorts: the input bytes to the named method, unchanged."""
        import grpc

        if self.grpc_target is None:
            return _json({"error": {"code": 400, "message": "the model has no grpcPorts"}}, 400)
        with grpc.insecure_channel(self.grpc_target) as channel:
            call: Any = channel.unary_unary(body["methodName"])
            try:
                output = call(base64.b64decode(body.get("input", "")), metadata=self.grpc_metadata, timeout=120)
            except grpc.RpcError as exc:
                return _json({"error": {"code": 400, "message": exc.details(), "status": exc.code().name}}, 400)
        return _json({"output": base64.b64encode(output).decode()})

    def set_traffic(self, endpoint: dict[str, Any], split: dict[str, Any], also: str | None = None
                    ) -> Response | None:
        """Set a split as Vertex AI does, or the error it answers: 100 in all, deployed models only."""
        known = {m["id"] for m in endpoint["deployedModels"]} | ({also} if also else set())
        if sum(int(v) for v in split.values()) != 100 or not set(split) <= known:
            return _json({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                    "message": f"invalid traffic split {split}"}}, 400)
        endpoint["trafficSplit"] = {key: int(value) for key, value in split.items()}
        return None

    def poll(self, name: str) -> dict[str, Any]:
        """One poll of a running deployment: after ``deploy_polls`` of them it is done and deployed."""
        item = self.running[name]
        item["polls"] -= 1
        endpoint_id = item["endpoint"]["name"].rsplit("/", 1)[-1]
        self.log_entries.append({  # what the container writes while the model downloads
            "logName": "projects/demo/logs/aiplatform.googleapis.com%2Fprediction_container",
            "resource": {"type": "aiplatform.googleapis.com/Endpoint", "labels": {"endpoint_id": endpoint_id}},
            "timestamp": _now(), "insertId": f"log-{next(self.ids)}", "severity": "INFO",
            "jsonPayload": {"message": f"downloading gs://models/smol/model.gguf: {item['polls']} polls left"}})
        if item["polls"] <= 0:
            item["endpoint"]["deployedModels"].append(item["deployed"])
            del self.running[name]
            return {"name": name, "done": True,
                    "response": {"@type": TYPE + "DeployModelResponse", "deployedModel": item["deployed"]}}
        return dict(item["operation"])

    def run_batch_job(self, job: dict[str, Any]) -> None:
        from google.cloud import storage

        client = storage.Client()
        rows: list[Any] = []
        for uri in job["inputConfig"]["gcsSource"]["uris"]:
            bucket, _, path = uri.removeprefix("gs://").partition("/")
            text = client.bucket(bucket).blob(path).download_as_text()
            rows.extend(json.loads(line) for line in text.splitlines() if line.strip())
        job["state"] = "JOB_STATE_RUNNING"
        size = int(job.get("manualBatchTuningParameters", {}).get("batchSize", 64))
        lines: list[dict[str, Any]] = []
        done = failed = 0
        for start in range(0, len(rows), size):
            chunk = rows[start:start + size]
            body: dict[str, Any] = {"instances": chunk}
            if "modelParameters" in job:
                body["parameters"] = job["modelParameters"]
            self.batch_bodies.append(body)
            answer = requests.post(self.container + "/predict", json=body, timeout=300)
            if answer.status_code == 200:
                predictions = answer.json()["predictions"]
                lines += [{"instance": row, "prediction": p} for row, p in zip(chunk, predictions, strict=True)]
                done += len(chunk)
            else:
                lines += [{"instance": row, "error": {"code": answer.status_code, "message": answer.text}}
                          for row in chunk]
                failed += len(chunk)
        prefix = job["outputConfig"]["gcsDestination"]["outputUriPrefix"].removeprefix("gs://").rstrip("/")
        bucket, _, folder = prefix.partition("/")
        directory = f"{folder}/prediction-{job['displayName']}-{next(self.ids)}".lstrip("/")
        client.bucket(bucket).blob(f"{directory}/prediction.results-00000-of-00001").upload_from_string(
            "".join(json.dumps(line) + "\n" for line in lines))
        client.close()
        job.update(state="JOB_STATE_SUCCEEDED", outputInfo={"gcsOutputDirectory": f"gs://{bucket}/{directory}"},
                   completionStats={"successfulCount": str(done), "failedCount": str(failed)})


def _matches(entry: dict[str, Any], filter_: str) -> bool:
    """The part of Cloud Logging's filter language the deploy tail uses: resource type, endpoint id
    and ``timestamp>=``."""
    endpoint = re.search(r'resource\.labels\.endpoint_id="([^"]+)"', filter_)
    since = re.search(r'timestamp>="([^"]+)"', filter_)
    return (entry["resource"]["type"] in filter_
            and (endpoint is None or entry["resource"]["labels"].get("endpoint_id") == endpoint.group(1))
            and (since is None or _instant(entry["timestamp"]) >= _instant(since.group(1))))


def _instant(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _json(value: Any, status: int = 200) -> Response:
    return Response(json.dumps(value), status=status, content_type="application/json")


class RunningStandIn:
    def __init__(self, standin: VertexStandIn) -> None:
        self.standin = standin
        self._server = make_server("127.0.0.1", 0, standin.app(), threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
