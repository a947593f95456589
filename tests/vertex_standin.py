"""A local stand-in for the Vertex AI REST API (v1) that records every request it receives.

It answers model upload, endpoint create/get/delete, deploy and undeploy with finished operations,
and forwards :predict, :rawPredict and :streamRawPredict to a real container, as Vertex does.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
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

    def app(self) -> Flask:
        app = Flask("vertex-standin")

        @app.route("/v1/<path:rest>", methods=["GET", "POST", "DELETE"])
        def api(rest: str) -> Response:
            body = request.get_json(silent=True)
            self.calls.append(Recorded(request.method, "/v1/" + rest, body))
            return self.dispatch(request.method, rest, body)

        return app

    def operation(self, parent: str, kind: str, payload: dict[str, Any]) -> Response:
        name = f"{parent}/operations/{next(self.ids)}"
        return _json({"name": name, "done": True, "response": {"@type": TYPE + kind, **payload}})

    def dispatch(self, method: str, rest: str, body: Any) -> Response:
        parent_match = re.match(r"(projects/[^/]+/locations/[^/]+)", rest)
        parent = parent_match.group(1) if parent_match else ""
        if rest.endswith("/models:upload"):
            name = f"{parent}/models/{next(self.ids)}"
            self.models[name] = {**body["model"], "name": name}
            return self.operation(parent, "UploadModelResponse", {"model": name})
        if method == "GET" and re.search(r"/models/[^/:]+$", rest):
            if rest not in self.models:
                return _json({"error": {"code": 404, "message": f"{rest} not found", "status": "NOT_FOUND"}}, 404)
            return _json(self.models[rest])
        if method == "POST" and rest.endswith("/endpoints"):
            name = f"{parent}/endpoints/{next(self.ids)}"
            endpoint = {**body, "name": name, "deployedModels": []}
            self.endpoints[name] = endpoint
            return self.operation(parent, "Endpoint", endpoint)
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
        if verb is None and method == "DELETE":
            del self.endpoints[name]
            return _json({"name": f"{parent}/operations/{next(self.ids)}", "done": True,
                          "response": {"@type": "type.googleapis.com/google.protobuf.Empty"}})
        if verb == "deployModel":
            deployed = {**body["deployedModel"], "id": str(next(self.ids))}
            endpoint["deployedModels"].append(deployed)
            return self.operation(parent, "DeployModelResponse", {"deployedModel": deployed})
        if verb == "undeployModel":
            endpoint["deployedModels"] = [m for m in endpoint["deployedModels"] if m["id"] != body["deployedModelId"]]
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
        if verb == "streamRawPredict":
            upstream = requests.post(self.container + "/predict", data=raw, headers=headers, stream=True, timeout=120)

            return Response(upstream.iter_content(chunk_size=None), status=upstream.status_code,
                            content_type=upstream.headers["Content-Type"])
        return _json({"error": {"code": 404, "message": f"unknown verb {verb}"}}, 404)


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
