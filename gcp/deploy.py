"""Deployment on Vertex AI with the aiplatform SDK's v1 clients: the requests, built once.

Each operation is built as the exact ``aiplatform_v1`` request that is sent (``--dry-run`` prints
it as the API's JSON instead of sending it). The container spec matches what the container reads:
``AIP_PREDICT_ROUTE=/predict``, ``AIP_HEALTH_ROUTE=/health``, port 8080, ``LLAMA_ARG_*`` settings,
a startup probe that waits for the model (``python -m gcp.probe``), a health probe (``/health``: ready to
serve) and a liveness probe (``/live``: the engine thread is not wedged; a failing one restarts the container).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import google.auth
import requests
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.transport.requests import AuthorizedSession
from google.cloud import aiplatform_v1 as v1
from google.longrunning import operations_pb2
from google.protobuf import duration_pb2, json_format

from gcp import rollout
from gcp.limits import DEDICATED_TIMEOUT_THRESHOLD_S

PREDICT_ROUTE = "/predict"
HEALTH_ROUTE = "/health"
CONTAINER_PORT = 8080
PROBE_COMMAND = ("python", "-m", "gcp.probe")
LIVENESS_ROUTE = "/live"


@dataclass(frozen=True)
class Target:
    project: str
    region: str
    api_endpoint: str | None = None
    anonymous: bool = False

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    def endpoint_name(self, endpoint: str) -> str:
        return endpoint if endpoint.startswith("projects/") else f"{self.parent}/endpoints/{endpoint}"

    def model_name(self, model: str) -> str:
        return model if model.startswith("projects/") else f"{self.parent}/models/{model}"

    @property
    def host(self) -> str:
        """The API host: ``--api-endpoint``, else the region's public one."""
        return self.api_endpoint or f"{self.region}-aiplatform.googleapis.com"

    def session(self) -> requests.Session:
        """An HTTP session for the REST calls the client libraries do not make (with ``--anonymous``,
        no credentials)."""
        if self.anonymous:
            return requests.Session()
        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        return AuthorizedSession(credentials)

    def client_kwargs(self, api_endpoint: str | None = None) -> dict[str, Any]:
        host = api_endpoint or self.host
        credentials: Credentials | None = AnonymousCredentials() if self.anonymous else None
        return {"client_options": ClientOptions(api_endpoint=host), "transport": "rest",
                "credentials": credentials}


@dataclass(frozen=True)
class UploadSpec:
    display_name: str
    image_uri: str
    artifact_uri: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    shared_memory_mb: int = 1024
    deployment_timeout_s: int = 3600
    probe_period_s: int = 10
    probe_timeout_s: int = 5
    health_failures: int = 3  # health probe: ready to serve (/health 200); traffic stops after 3 failures
    liveness_period_s: int = 30  # liveness probe: alive (/live); the container restarts after 3 failures
    liveness_timeout_s: int = 10
    liveness_failures: int = 3
    invoke: bool = False  # invokeRoutePrefix "/*": every container path under .../invoke/ (no :predict)
    parent_model: str | None = None  # upload a new version of this model
    grpc_port: int = 0  # grpcPorts: Vertex AI sends :directPredict and :directRawPredict here (LLAMA_ARG_GRPC_PORT)

    @property
    def probe_failures(self) -> int:
        """The startup probe may fail for the whole deployment timeout (the model's download and load)."""
        return max(1, math.ceil(self.deployment_timeout_s / self.probe_period_s))


def upload_request(target: Target, spec: UploadSpec) -> v1.UploadModelRequest:
    container = v1.ModelContainerSpec(
        image_uri=spec.image_uri,
        health_route=HEALTH_ROUTE,
        ports=[v1.Port(container_port=CONTAINER_PORT)],
        env=[v1.EnvVar(name=name, value=value) for name, value in sorted(spec.env.items())],
        shared_memory_size_mb=spec.shared_memory_mb,
        deployment_timeout=duration_pb2.Duration(seconds=spec.deployment_timeout_s),
        startup_probe=v1.Probe(
            exec_=v1.Probe.ExecAction(command=list(PROBE_COMMAND)),
            period_seconds=spec.probe_period_s,
            timeout_seconds=spec.probe_timeout_s,
            failure_threshold=spec.probe_failures,
        ),
        health_probe=v1.Probe(
            http_get=v1.Probe.HttpGetAction(path=HEALTH_ROUTE, port=CONTAINER_PORT),
            period_seconds=spec.probe_period_s,
            timeout_seconds=spec.probe_timeout_s,
            failure_threshold=spec.health_failures,
        ),
        liveness_probe=v1.Probe(
            http_get=v1.Probe.HttpGetAction(path=LIVENESS_ROUTE, port=CONTAINER_PORT),
            period_seconds=spec.liveness_period_s,
            timeout_seconds=spec.liveness_timeout_s,
            failure_threshold=spec.liveness_failures,
        ),
    )
    if spec.grpc_port:
        container.grpc_ports = [v1.Port(container_port=spec.grpc_port)]
    if spec.invoke:
        container.invoke_route_prefix = "/*"
    else:
        container.predict_route = PREDICT_ROUTE
    model = v1.Model(display_name=spec.display_name, container_spec=container)
    if spec.artifact_uri:
        model.artifact_uri = spec.artifact_uri
    request = v1.UploadModelRequest(parent=target.parent, model=model)
    if spec.parent_model:
        request.parent_model = target.model_name(spec.parent_model)
    return request


# --autoscale-metric: the metric Vertex AI scales replicas on. ``queue`` is the container's
# vllm:num_requests_waiting, which Vertex AI's AutoMetrics export to Cloud Monitoring under this name.
AUTOSCALE_METRICS = {
    "cpu": "aiplatform.googleapis.com/prediction/online/cpu/utilization",
    "gpu-duty-cycle": "aiplatform.googleapis.com/prediction/online/accelerator/duty_cycle",
    "request-count": "aiplatform.googleapis.com/prediction/online/request_count",
    "queue": "prometheus.googleapis.com/vertex_vllm_num_requests_waiting",
}
MAX_INFERENCE_TIMEOUT_S = 3600
MAX_DEPLOYMENT_TIMEOUT_S = 7200


class DeploySpecError(ValueError):
    """Deploy flags that cannot make a deployment; the message names them and the fix."""


@dataclass(frozen=True)
class DeploySpec:
    model: str
    endpoint: str | None = None
    endpoint_display_name: str = "vertex-llama"
    deployed_display_name: str | None = None  # default: the model's display name
    machine_type: str = "g2-standard-8"
    accelerator_type: str | None = "NVIDIA_L4"
    accelerator_count: int = 1
    min_replicas: int = 1
    max_replicas: int = 1
    required_replicas: int | None = None
    autoscaling: tuple[tuple[str, int], ...] = ()  # (AUTOSCALE_METRICS key, target)
    dedicated: bool = False
    streaming: bool = False
    invoke: bool = False  # the model has invoke routes (upload --invoke)
    timeout_s: int | None = None  # the dedicated endpoint's inference timeout; None: Vertex's default (600 s)
    service_account: str | None = None
    spot: bool = False

    @property
    def wants_dedicated(self) -> bool:
        """Streaming, invoke routes and inference timeouts past 60 s need a dedicated endpoint."""
        return (self.dedicated or self.streaming or self.invoke
                or (self.timeout_s is not None and self.timeout_s > DEDICATED_TIMEOUT_THRESHOLD_S))

    def checked(self) -> DeploySpec:
        if self.timeout_s is not None and not 1 <= self.timeout_s <= MAX_INFERENCE_TIMEOUT_S:
            raise DeploySpecError(f"--timeout {self.timeout_s}: an inference timeout is 1 to "
                                  f"{MAX_INFERENCE_TIMEOUT_S} seconds")
        if self.min_replicas == 0:
            raise DeploySpecError("--min-replicas 0: scale to zero is a preview of Vertex AI's v1beta1 API "
                                  "(scaleToZeroSpec) and this tool speaks v1, where a model keeps 1 replica at least")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise DeploySpecError("--min-replicas must be at least 1 and at most --max-replicas")
        if self.required_replicas is not None and not 1 <= self.required_replicas <= self.min_replicas:
            raise DeploySpecError("--required-replica-count must be at least 1 and at most --min-replicas")
        for metric, target in self.autoscaling:
            if metric not in AUTOSCALE_METRICS:
                raise DeploySpecError(f"--autoscale-metric {metric}: one of {', '.join(AUTOSCALE_METRICS)}")
            if target < 1:
                raise DeploySpecError(f"the {metric} autoscaling target must be at least 1")
        return self

    def check_endpoint(self, endpoint: v1.Endpoint) -> None:
        """An existing endpoint must be dedicated where the deployment needs one."""
        if endpoint.dedicated_endpoint_enabled or not self.wants_dedicated:
            return
        needs = ("--streaming (streamRawPredict)" if self.streaming else "invoke routes (upload --invoke)"
                 if self.invoke else "--dedicated" if self.dedicated else f"--timeout {self.timeout_s}")
        raise DeploySpecError(
            f"{needs} needs a dedicated endpoint, and {endpoint.name} is a shared one: deploy without --endpoint "
            "to create a dedicated endpoint, or name a dedicated one")


def create_endpoint_request(target: Target, spec: DeploySpec) -> v1.CreateEndpointRequest:
    endpoint = v1.Endpoint(display_name=spec.endpoint_display_name, dedicated_endpoint_enabled=spec.wants_dedicated)
    if spec.wants_dedicated and spec.timeout_s is not None:
        endpoint.client_connection_config = v1.ClientConnectionConfig(
            inference_timeout=duration_pb2.Duration(seconds=spec.timeout_s))
    return v1.CreateEndpointRequest(parent=target.parent, endpoint=endpoint)


def machine_spec(machine_type: str, accelerator_type: str | None, accelerator_count: int) -> v1.MachineSpec:
    """A machine, with its accelerators when it has any (``accelerator_type`` None or count 0: none)."""
    machine = v1.MachineSpec(machine_type=machine_type)
    if accelerator_type and accelerator_count:
        machine.accelerator_type = getattr(v1.AcceleratorType, accelerator_type)
        machine.accelerator_count = accelerator_count
    return machine


def deploy_request(target: Target, spec: DeploySpec, endpoint_name: str,
                   traffic: dict[str, int] | None = None) -> v1.DeployModelRequest:
    """``traffic``: the endpoint's split with the new model as "0" (gcp/rollout.py); default all to it."""
    machine = machine_spec(spec.machine_type, spec.accelerator_type, spec.accelerator_count)
    metrics = [v1.AutoscalingMetricSpec(metric_name=AUTOSCALE_METRICS[metric], target=target)
               for metric, target in spec.autoscaling]
    resources = v1.DedicatedResources(
        machine_spec=machine, min_replica_count=spec.min_replicas, max_replica_count=spec.max_replicas,
        autoscaling_metric_specs=metrics, spot=spec.spot,
    )
    if spec.required_replicas is not None:
        resources.required_replica_count = spec.required_replicas
    deployed = v1.DeployedModel(model=target.model_name(spec.model),
                                display_name=spec.deployed_display_name or spec.model.rsplit("/", 1)[-1],
                                dedicated_resources=resources)
    if spec.service_account:
        deployed.service_account = spec.service_account
    return v1.DeployModelRequest(endpoint=endpoint_name, deployed_model=deployed,
                                 traffic_split=traffic or {rollout.NEW: 100})


def undeploy_requests(endpoint: v1.Endpoint, deployed_model_id: str | None) -> list[v1.UndeployModelRequest]:
    """One request a model; each moves the removed model's traffic to those that stay (Vertex AI
    refuses to undeploy a model that still has traffic)."""
    remaining = [model.id for model in endpoint.deployed_models]
    split = dict(endpoint.traffic_split)
    requests_out = []
    for model_id in [deployed_model_id] if deployed_model_id else list(remaining):
        split = rollout.split_without(split, remaining, model_id)
        remaining = [other for other in remaining if other != model_id]
        requests_out.append(undeploy_request(endpoint.name, model_id, split))
    return requests_out


def undeploy_request(endpoint_name: str, deployed_model_id: str,
                     traffic: dict[str, int] | None = None) -> v1.UndeployModelRequest:
    request = v1.UndeployModelRequest(endpoint=endpoint_name, deployed_model_id=deployed_model_id)
    if traffic:
        request.traffic_split = traffic
    return request


def delete_endpoint_request(endpoint_name: str) -> v1.DeleteEndpointRequest:
    return v1.DeleteEndpointRequest(name=endpoint_name)


def predict_request(endpoint_name: str, instances: Sequence[Any], parameters: Any = None) -> v1.PredictRequest:
    request = v1.PredictRequest(endpoint=endpoint_name)
    request.instances.extend(list(instances))  # proto-plus marshals JSON values into protobuf Value
    if parameters is not None:
        request.parameters = parameters
    return request


@dataclass(frozen=True)
class RawCall:
    """``:rawPredict`` / ``:streamRawPredict``: the body goes to the container as it is. (Like the
    SDK's ``Endpoint.raw_predict``, these are plain HTTP posts: the v1 client would wrap the body in
    an ``HttpBody`` message.)"""

    endpoint: str
    verb: str
    body: Any
    invoke_path: str = ""

    @property
    def path(self) -> str:
        if self.verb == "invoke":
            return f"/v1/{self.endpoint}/invoke/{self.invoke_path.lstrip('/')}"
        return f"/v1/{self.endpoint}:{self.verb}"


def raw_predict_request(endpoint_name: str, body: Any) -> RawCall:
    return RawCall(endpoint_name, "rawPredict", body)


def stream_raw_predict_request(endpoint_name: str, body: Any) -> RawCall:
    return RawCall(endpoint_name, "streamRawPredict", body)


def invoke_request(endpoint_name: str, path: str, body: Any) -> RawCall:
    """A custom route (``invokeRoutePrefix: "/*"``): ``path`` on the container, e.g. /v1/chat/completions."""
    if not path.startswith("/"):
        raise ValueError(f"the invoke path must start with '/': {path!r}")
    return RawCall(endpoint_name, "invoke", body, path)


def as_json(request: Any) -> dict[str, Any]:
    """The request as the REST API's JSON (what ``--dry-run`` prints)."""
    if isinstance(request, RawCall):
        return {"path": request.path, "body": request.body}
    return json_format.MessageToDict(type(request).pb(request))


class Vertex:
    """The v1 clients for one project and region."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.models = v1.ModelServiceClient(**target.client_kwargs())
        self.endpoints = v1.EndpointServiceClient(**target.client_kwargs())

    def upload(self, request: v1.UploadModelRequest) -> dict[str, str]:
        response = self.models.upload_model(request=request).result()
        return {"model": str(response.model), "model_version_id": str(response.model_version_id) or "1"}

    def update_traffic(self, request: v1.UpdateEndpointRequest) -> v1.Endpoint:
        return self.endpoints.update_endpoint(request=request)

    def get_model(self, name: str) -> v1.Model:
        return self.models.get_model(name=name)

    def create_endpoint(self, request: v1.CreateEndpointRequest) -> v1.Endpoint:
        return self.endpoints.create_endpoint(request=request).result()

    def get_endpoint(self, name: str) -> v1.Endpoint:
        return self.endpoints.get_endpoint(name=name)

    def start_deploy(self, request: v1.DeployModelRequest) -> Any:
        """The deployment's long-running operation (gcp/operations.py waits on it)."""
        return self.endpoints.deploy_model(request=request)

    def operations_in_flight(self, endpoint_name: str) -> list[dict[str, Any]]:
        listed = self.endpoints.list_operations(request=operations_pb2.ListOperationsRequest(name=endpoint_name))
        return [json_format.MessageToDict(operation) for operation in listed.operations if not operation.done]

    def undeploy(self, request: v1.UndeployModelRequest) -> None:
        self.endpoints.undeploy_model(request=request).result()

    def delete_endpoint(self, request: v1.DeleteEndpointRequest) -> None:
        self.endpoints.delete_endpoint(request=request).result()

    def predictions(self, endpoint_name: str) -> v1.PredictionServiceClient:
        """A prediction client; a dedicated endpoint is called on its own DNS name."""
        endpoint = self.get_endpoint(endpoint_name)
        host = endpoint.dedicated_endpoint_dns or None
        return v1.PredictionServiceClient(**self.target.client_kwargs(host))

    def predict(self, request: v1.PredictRequest) -> dict[str, Any]:
        response = self.predictions(request.endpoint).predict(request=request)
        return json_format.MessageToDict(v1.PredictResponse.pb(response))

    def _post(self, call: RawCall, stream: bool) -> requests.Response:
        endpoint = self.get_endpoint(call.endpoint)
        host = endpoint.dedicated_endpoint_dns or self.target.host
        base = host if host.startswith(("http://", "https://")) else f"https://{host}"
        response = self.target.session().post(base + call.path, json=call.body, stream=stream, timeout=3600)
        if response.status_code >= 400:
            raise RuntimeError(f"{call.verb} answered {response.status_code}: {response.text[:500]}")
        return response

    def raw_predict(self, call: RawCall) -> bytes:
        return self._post(call, stream=False).content

    def stream_raw_predict(self, call: RawCall) -> Iterator[bytes]:
        with self._post(call, stream=True) as response:
            yield from response.iter_content(chunk_size=None)
