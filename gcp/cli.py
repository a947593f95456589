"""``python -m gcp``: from a GGUF in a bucket to a serving Vertex AI endpoint.

    python -m gcp upload --project P --region R --image IMAGE --artifact-uri gs://bucket/model/
    python -m gcp deploy --project P --region R --model MODEL_ID [--machine-type ...] [--streaming]
    python -m gcp predict --project P --region R --endpoint ENDPOINT_ID --instances '[...]'
    python -m gcp raw-predict | stream-raw-predict --endpoint ENDPOINT_ID --body '{...}'
    python -m gcp invoke --endpoint ENDPOINT_ID --path /v1/chat/completions --body '{...}' [--stream]
    python -m gcp doctor --project P --region R --model gs://bucket/model/ [--machine-type ...] [--ctx-size N]
    python -m gcp status --project P --region R --endpoint ENDPOINT_ID
    python -m gcp traffic --endpoint ENDPOINT_ID --split ID=90,ID=10 | rollback --endpoint ENDPOINT_ID
    python -m gcp undeploy --project P --region R --endpoint ENDPOINT_ID [--delete-endpoint]
    python -m gcp batch-predict --project P --region R --model MODEL_ID --input gs://b/rows.jsonl \
        --output gs://b/out/ [--batch-size 64] [--wait]

Every command takes ``--dry-run``: print the exact API requests (as the REST API's JSON) and send
nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from gcp import batch, deploy, doctor, limits, logtail, operations, rollout, status
from gcp.parser import SETTING_FLAGS, accelerator_type, build_parser

GRPC_PORT_ENV = SETTING_FLAGS["grpc_port"][1]


def _print(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _dry(method: str, request: Any) -> None:
    _print({"method": method, "request": deploy.as_json(request)})


def _upload(args: argparse.Namespace, target: deploy.Target) -> None:
    kind_limits = limits.endpoint_limits(args.endpoint_kind, args.inference_timeout) if args.endpoint_kind else {}
    env = {**kind_limits, **dict(args.env)}
    for dest, (_, name) in SETTING_FLAGS.items():
        value = getattr(args, dest)
        if value is not None:
            env[name] = str(value)
    request = deploy.upload_request(target, deploy.UploadSpec(
        display_name=args.display_name, image_uri=args.image, artifact_uri=args.artifact_uri, env=env,
        shared_memory_mb=args.shared_memory_mb, deployment_timeout_s=args.deployment_timeout, invoke=args.invoke,
        parent_model=args.parent_model, grpc_port=int(env.get(GRPC_PORT_ENV) or 0),
    ))
    if args.dry_run:
        _dry("ModelService.UploadModel", request)
        return
    _print(deploy.Vertex(target).upload(request))


def _deploy_spec(args: argparse.Namespace) -> deploy.DeploySpec:
    shortcuts = (("cpu", args.cpu_target), ("gpu-duty-cycle", args.gpu_target))
    autoscaling = [(metric, target) for metric, target in shortcuts if target]
    if args.autoscale_metric:
        autoscaling.append((args.autoscale_metric, args.autoscale_target))
    return deploy.DeploySpec(
        model=args.model, endpoint=args.endpoint, endpoint_display_name=args.endpoint_display_name,
        deployed_display_name=args.deployed_model_display_name, machine_type=args.machine_type,
        accelerator_type=accelerator_type(args),
        accelerator_count=args.accelerator_count, min_replicas=args.min_replicas, max_replicas=args.max_replicas,
        required_replicas=args.required_replica_count, autoscaling=tuple(autoscaling), dedicated=args.dedicated,
        streaming=args.streaming, timeout_s=args.timeout, service_account=args.service_account, spot=args.spot,
    ).checked()


def _status_command(target: deploy.Target, endpoint_name: str) -> str:
    return (f"python -m gcp status --project {target.project} --region {target.region} "
            f"--endpoint {endpoint_name.rsplit('/', 1)[-1]}")


def _deploy_progress(tail: logtail.LogTail | None) -> Callable[[], None]:
    """Each poll of the deployment: how long it has run, and the container's new log lines."""
    started = operations.CLOCK()

    def on_poll() -> None:
        print(f"deploying ({operations.CLOCK() - started:.0f} s)", file=sys.stderr)
        if tail is not None:
            tail()

    return on_poll


def _deploy(args: argparse.Namespace, target: deploy.Target) -> None:
    spec = _deploy_spec(args)
    if args.dry_run:
        if not spec.endpoint:
            _dry("EndpointService.CreateEndpoint", deploy.create_endpoint_request(target, spec))
        name = target.endpoint_name(spec.endpoint) if spec.endpoint else f"{target.parent}/endpoints/NEW"
        if args.traffic != 100:
            print("note: the models already on the endpoint share the rest of the traffic; their ids are "
                  "read from the endpoint when the request is sent", file=sys.stderr)
        _dry("EndpointService.DeployModel", deploy.deploy_request(target, spec, name, {rollout.NEW: args.traffic}))
        return
    vertex = deploy.Vertex(target)
    model = vertex.get_model(target.model_name(spec.model))
    spec = dataclasses.replace(spec, invoke=bool(model.container_spec.invoke_route_prefix),
                               deployed_display_name=spec.deployed_display_name or model.display_name or None)
    if spec.endpoint:
        endpoint = vertex.get_endpoint(target.endpoint_name(spec.endpoint))
        spec.check_endpoint(endpoint)
        traffic = rollout.split_with_new(dict(endpoint.traffic_split),
                                         [model.id for model in endpoint.deployed_models], args.traffic)
        dedicated = bool(endpoint.dedicated_endpoint_enabled)
        timeout: float | None = (operations.seconds(endpoint.client_connection_config.inference_timeout) if dedicated
                                  else 60)
    else:
        traffic = rollout.split_with_new({}, [], args.traffic)
        endpoint, dedicated, timeout = None, spec.wants_dedicated, spec.timeout_s
    problem = limits.kind_mismatch(limits.model_env(model), dedicated, int(timeout or 600))
    if problem:
        print(f"warning: {problem}", file=sys.stderr)
    if endpoint is None:
        endpoint = vertex.create_endpoint(deploy.create_endpoint_request(target, spec))
    print(f"endpoint {endpoint.name}\n  {status.console_url(target, endpoint.name)}", file=sys.stderr)
    wait_s = operations.deployment_wait_seconds(int(operations.seconds(model.container_spec.deployment_timeout))
                                                or deploy.MAX_DEPLOYMENT_TIMEOUT_S)
    tail = None if args.no_logs else logtail.LogTail.for_endpoint(
        logtail.logging_client(target, args.logging_endpoint), target.project, endpoint.name, datetime.now(UTC))
    try:
        deployed = operations.wait_for(vertex.start_deploy(deploy.deploy_request(target, spec, endpoint.name, traffic)),
                                       wait_s, _deploy_progress(tail))
    except operations.OperationTimeoutError:
        sys.stderr.write(f"python -m gcp deploy: the deployment to {endpoint.name} is still running after "
                         f"{wait_s:.0f} s (the model's deployment timeout plus {operations.PROVISIONING_MARGIN_S} s "
                         f"to provision the machine); it goes on at Vertex AI. Follow it with:\n  "
                         f"{_status_command(target, endpoint.name)}\n")
        sys.exit(3)
    if tail is not None:
        tail()  # what the container wrote since the last poll
    _print({"endpoint": endpoint.name, "deployed_model_id": deployed.deployed_model.id,
            "dedicated_endpoint_dns": endpoint.dedicated_endpoint_dns or None,
            "console": status.console_url(target, endpoint.name)})


def _traffic(args: argparse.Namespace, target: deploy.Target) -> None:
    name = target.endpoint_name(args.endpoint)
    vertex = deploy.Vertex(target)
    endpoint = vertex.get_endpoint(name)
    ids = [model.id for model in endpoint.deployed_models]
    split = rollout.parse_split(args.split, ids) if args.command == "traffic" else rollout.rollback_split(endpoint)
    request = rollout.traffic_request(name, split)
    if args.dry_run:
        _dry("EndpointService.UpdateEndpoint", request)
        return
    updated = vertex.update_traffic(request)
    _print({"endpoint": name, "traffic_split": dict(updated.traffic_split)})


def _doctor(args: argparse.Namespace, target: deploy.Target) -> None:
    from google.cloud import storage

    plan = doctor.Plan(args.machine_type, accelerator_type(args), args.accelerator_count, args.ctx_size,
                       args.parallel, args.deployment_timeout, args.max_replicas)
    client = storage.Client(project=target.project)
    try:
        findings = doctor.diagnose(target, client, args.model, plan, args.service_account, args.iam_endpoint,
                                   args.quotas_endpoint)
    finally:
        client.close()
    print("\n".join(line for finding in findings for line in finding.lines()))
    if any(finding.status == "fail" for finding in findings):
        sys.exit(1)


def _status(args: argparse.Namespace, target: deploy.Target) -> None:
    name = target.endpoint_name(args.endpoint)
    vertex = deploy.Vertex(target)
    _print({**status.endpoint_status(vertex.get_endpoint(name), vertex.operations_in_flight(name)),
            "console": status.console_url(target, name)})


def _predict(args: argparse.Namespace, target: deploy.Target) -> None:
    name = target.endpoint_name(args.endpoint)
    if args.command == "predict":
        request: Any = deploy.predict_request(name, args.instances, args.parameters)
        if args.dry_run:
            _dry("PredictionService.Predict", request)
        else:
            _print(deploy.Vertex(target).predict(request))
    elif args.command == "raw-predict":
        request = deploy.raw_predict_request(name, args.body)
        if args.dry_run:
            _dry("PredictionService.RawPredict", request)
        else:
            sys.stdout.write(deploy.Vertex(target).raw_predict(request).decode() + "\n")
    else:
        if args.command == "invoke":
            body = {**args.body, **({"stream": True} if args.stream else {})}
            method, request = "Invoke", deploy.invoke_request(name, args.path, body)
        else:
            method, request = "PredictionService.StreamRawPredict", deploy.stream_raw_predict_request(
                name, {**args.body, "stream": True})
        if args.dry_run:
            _dry(method, request)
            return
        for chunk in deploy.Vertex(target).stream_raw_predict(request):
            sys.stdout.write(chunk.decode())
            sys.stdout.flush()


def _undeploy(args: argparse.Namespace, target: deploy.Target) -> None:
    name = target.endpoint_name(args.endpoint)
    if args.dry_run:
        model_id = args.deployed_model_id or "ALL"
        _dry("EndpointService.UndeployModel", deploy.undeploy_request(name, model_id))
        if args.delete_endpoint:
            _dry("EndpointService.DeleteEndpoint", deploy.delete_endpoint_request(name))
        return
    vertex = deploy.Vertex(target)
    endpoint = vertex.get_endpoint(name)
    requests = deploy.undeploy_requests(endpoint, args.deployed_model_id)
    for request in requests:
        vertex.undeploy(request)
    if args.delete_endpoint:
        vertex.delete_endpoint(deploy.delete_endpoint_request(name))
    _print({"endpoint": name, "undeployed": [r.deployed_model_id for r in requests],
            "deleted": bool(args.delete_endpoint)})


def _batch_predict(args: argparse.Namespace, target: deploy.Target) -> None:
    spec = batch.BatchSpec(
        model=args.model, inputs=batch.input_uris(args.input), output=args.output, display_name=args.display_name,
        input_format=args.input_format, machine_type=args.machine_type,
        accelerator_type=accelerator_type(args),
        accelerator_count=args.accelerator_count, starting_replicas=args.starting_replicas,
        max_replicas=args.max_replicas, batch_size=args.batch_size, service_account=args.service_account,
        parameters=args.parameters)
    try:
        request = batch.batch_request(target, spec)
    except batch.BatchSpecError as exc:
        sys.stderr.write(f"python -m gcp batch-predict: {exc}\n")
        sys.exit(2)
    if args.dry_run:
        _dry("JobService.CreateBatchPredictionJob", request)
        return
    jobs = batch.BatchJobs(target)
    job = jobs.create(request)
    print(f"batch prediction job {job.name} created", file=sys.stderr)
    if args.wait:
        job = batch.wait_for_job(lambda: jobs.get(job.name), args.poll_seconds)
    summary = batch.job_summary(job)
    _print(summary)
    if args.wait and summary["state"] not in batch.GOOD_STATES:
        sys.exit(1)


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    target = deploy.Target(args.project, args.region, args.api_endpoint, args.anonymous)
    handlers = {"upload": _upload, "deploy": _deploy, "predict": _predict, "raw-predict": _predict,
                "stream-raw-predict": _predict, "invoke": _predict, "undeploy": _undeploy,
                "batch-predict": _batch_predict, "status": _status, "traffic": _traffic, "rollback": _traffic,
                "doctor": _doctor}
    try:
        handlers[args.command](args, target)
    except (deploy.DeploySpecError, rollout.TrafficError) as exc:
        sys.stderr.write(f"python -m gcp {args.command}: {exc}\n")
        sys.exit(2)
    except Exception as exc:
        sys.stderr.write(f"python -m gcp {args.command}: {type(exc).__name__}: {exc}\n")
        sys.exit(1)
