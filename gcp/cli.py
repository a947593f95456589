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

# Container settings a deployment commonly sets, as the LLAMA_ARG_* variables the container reads.
SETTING_FLAGS = {
    "ctx_size": ("--ctx-size", "LLAMA_ARG_CTX_SIZE"),
    "parallel": ("--parallel", "LLAMA_ARG_N_PARALLEL"),
    "n_gpu_layers": ("--n-gpu-layers", "LLAMA_ARG_N_GPU_LAYERS"),
    "alias": ("--alias", "LLAMA_ARG_ALIAS"),
    "metrics": ("--metrics", "LLAMA_ARG_ENDPOINT_METRICS"),
}


class DefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every flag's help ends with its default, where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS) \
                and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, help="the Google Cloud project id")
    parser.add_argument("--region", required=True, help="e.g. us-central1")
    parser.add_argument("--api-endpoint", help="override the API host (default: REGION-aiplatform.googleapis.com)")
    parser.add_argument("--anonymous", action="store_true", help="no credentials (for local stand-ins of the API)")
    parser.add_argument("--dry-run", action="store_true", help="print the API requests, send nothing")


def _machine_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--machine-type", default="g2-standard-8", help="the replicas' machine type")
    parser.add_argument("--accelerator-type", default="NVIDIA_L4", help="e.g. NVIDIA_L4, NVIDIA_H100_80GB; 'none'")
    parser.add_argument("--accelerator-count", type=int, default=1, help="accelerators a replica")


def _accelerator_type(args: argparse.Namespace) -> str | None:
    return None if args.accelerator_type.lower() == "none" else str(args.accelerator_type)


def _json_arg(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None


def _env_arg(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gcp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    upload = commands.add_parser("upload", help="register the container and the model with Vertex AI",
                                 formatter_class=DefaultsHelpFormatter)
    _common(upload)
    upload.add_argument("--image", required=True, help="the container image URI (Artifact Registry)")
    upload.add_argument("--display-name", default="vertex-llama", help="the Model's display name")
    upload.add_argument("--artifact-uri", help="gs:// directory holding the .gguf (becomes AIP_STORAGE_URI)")
    upload.add_argument("--env", type=_env_arg, action="append", default=[], metavar="NAME=VALUE",
                        help="container environment, e.g. LLAMA_ARG_CTX_SIZE=8192 (repeatable)")
    for dest, (flag, env) in SETTING_FLAGS.items():
        upload.add_argument(flag, dest=dest, help=f"sets {env}")
    upload.add_argument("--endpoint-kind", choices=("shared", "dedicated"),
                        help="the endpoint the model is meant for: sets the generation deadline and the largest "
                             "predict answer to its limits (shared: 55 s, 1.5 MB; dedicated: --inference-timeout "
                             "less 5 s, 10 MB); --env wins")
    upload.add_argument("--inference-timeout", type=int, default=600,
                        help="the dedicated endpoint's inference timeout in seconds (with --endpoint-kind dedicated)")
    upload.add_argument("--shared-memory-mb", type=int, default=1024, help="the container's /dev/shm size")
    upload.add_argument("--deployment-timeout", type=int, default=3600, help="seconds (at most 7200)")
    upload.add_argument("--parent-model", help="upload a new version of this model (id or resource name)")
    upload.add_argument("--invoke", action="store_true",
                        help="expose every route under .../invoke/ (invokeRoutePrefix /*; disables :predict)")

    dep = commands.add_parser("deploy", help="deploy an uploaded model to an endpoint (created if needed)",
                              formatter_class=DefaultsHelpFormatter)
    _common(dep)
    dep.add_argument("--model", required=True, help="model id or resource name")
    dep.add_argument("--endpoint", help="an existing endpoint id or resource name to reuse")
    dep.add_argument("--endpoint-display-name", default="vertex-llama", help="a new endpoint's display name")
    _machine_flags(dep)
    dep.add_argument("--min-replicas", type=int, default=1, help="replicas at the least")
    dep.add_argument("--max-replicas", type=int, default=1, help="replicas at the most (autoscaling above min)")
    dep.add_argument("--required-replica-count", type=int,
                     help="replicas that must be up for the deployment to succeed (default: --min-replicas)")
    dep.add_argument("--cpu-target", type=int, help="autoscale on CPU utilisation (percent)")
    dep.add_argument("--gpu-target", type=int, help="autoscale on accelerator duty cycle (percent)")
    dep.add_argument("--autoscale-metric", choices=tuple(deploy.AUTOSCALE_METRICS),
                     help="autoscale on this metric (queue: the container's vllm:num_requests_waiting)")
    dep.add_argument("--autoscale-target", type=int, default=60,
                     help="the --autoscale-metric target (percent, or requests per replica)")
    dep.add_argument("--dedicated", action="store_true", help="a dedicated endpoint (10 MB bodies, SSE)")
    dep.add_argument("--streaming", action="store_true", help="needs streamRawPredict: implies --dedicated")
    dep.add_argument("--timeout", type=int,
                     help="the dedicated endpoint's inference timeout, 1-3600 s (over 60: dedicated; "
                          "default: Vertex AI's 600 s on a dedicated endpoint)")
    dep.add_argument("--deployed-model-display-name", help="default: the model's display name")
    dep.add_argument("--traffic", type=int, default=100,
                     help="percent of the endpoint's traffic for this model; the models already there share "
                          "the rest in their proportions (a canary: --traffic 10)")
    dep.add_argument("--service-account", help="the account the replicas run as (a model or adapters in your "
                                                "own bucket need it to read them); default: Vertex AI's")
    dep.add_argument("--spot", action="store_true", help="run the replicas on Spot VMs (cheaper, preemptible)")
    dep.add_argument("--no-logs", action="store_true",
                     help="do not show the container's log lines from Cloud Logging while waiting")
    dep.add_argument("--logging-endpoint", help="override the Cloud Logging API host (for local stand-ins)")

    for name, help_text in (("traffic", "set an endpoint's traffic split"),
                            ("rollback", "give all traffic back to the model deployed before the newest")):
        command = commands.add_parser(name, help=help_text, description=rollout.__doc__,
                                      formatter_class=DefaultsHelpFormatter)
        _common(command)
        command.add_argument("--endpoint", required=True, help="the endpoint id or resource name")
        if name == "traffic":
            command.add_argument("--split", required=True, metavar="ID=PERCENT,...",
                                 help="every deployed model's percent, 100 in all (unnamed models get 0)")

    doc = commands.add_parser("doctor", help="before a deploy: will the model fit, download in time, be "
                                             "readable, and is there quota", description=doctor.__doc__,
                              formatter_class=DefaultsHelpFormatter)
    _common(doc)
    doc.add_argument("--model", required=True, help="the gs:// model: a .gguf file or the directory holding one")
    _machine_flags(doc)
    doc.add_argument("--ctx-size", type=int, default=0, help="the total context (-c); 0: the model's")
    doc.add_argument("--parallel", type=int, default=4, help="slots (-np)")
    doc.add_argument("--deployment-timeout", type=int, default=3600, help="upload's --deployment-timeout, s")
    doc.add_argument("--max-replicas", type=int, default=1, help="replicas at the most (quota)")
    doc.add_argument("--service-account", help="the account the model will be served as")
    doc.add_argument("--iam-endpoint", default=doctor.IAM_TROUBLESHOOTER_HOST, help="the Policy Troubleshooter host")
    doc.add_argument("--quotas-endpoint", default=doctor.CLOUD_QUOTAS_HOST, help="the Cloud Quotas API host")

    stat = commands.add_parser("status", help="an endpoint's deployed models, replicas, traffic and running "
                                              "operations", formatter_class=DefaultsHelpFormatter)
    _common(stat)
    stat.add_argument("--endpoint", required=True, help="the endpoint id or resource name")

    for name, help_text in (("predict", "send {instances, parameters} to :predict"),
                            ("raw-predict", "send a body to :rawPredict"),
                            ("stream-raw-predict", "send a body to :streamRawPredict and print the stream"),
                            ("invoke", "send a body to a container route through .../invoke/PATH")):
        command = commands.add_parser(name, help=help_text, formatter_class=DefaultsHelpFormatter)
        _common(command)
        command.add_argument("--endpoint", required=True, help="the endpoint id or resource name")
        if name == "predict":
            command.add_argument("--instances", type=_json_arg, required=True, help="a JSON array")
            command.add_argument("--parameters", type=_json_arg, help="a JSON object merged into every instance")
        else:
            command.add_argument("--body", type=_json_arg, required=True, help="a JSON object")
        if name == "invoke":
            command.add_argument("--path", required=True, help="the container route, e.g. /v1/chat/completions")
            command.add_argument("--stream", action="store_true", help="print the response as it streams")

    undeploy = commands.add_parser("undeploy", help="undeploy models (and optionally delete the endpoint)",
                                   formatter_class=DefaultsHelpFormatter)
    _common(undeploy)
    undeploy.add_argument("--endpoint", required=True, help="the endpoint id or resource name")
    undeploy.add_argument("--deployed-model-id", help="default: every deployed model")
    undeploy.add_argument("--delete-endpoint", action="store_true", help="delete the endpoint afterwards")
    _add_batch_parser(commands)
    return parser


def _add_batch_parser(commands: Any) -> None:
    batch_parser = commands.add_parser(
        "batch-predict", formatter_class=DefaultsHelpFormatter,
        help="run an uploaded model over a JSONL file, BigQuery table or file list (a BatchPredictionJob)",
        description=batch.__doc__)
    _common(batch_parser)
    batch_parser.add_argument("--model", required=True, help="model id or resource name")
    batch_parser.add_argument("--input", action="append", required=True, metavar="URI",
                              help="gs:// JSONL file(s) (repeatable or comma-separated; wildcards as Vertex "
                                   "takes them), or one bq://PROJECT.DATASET.TABLE")
    batch_parser.add_argument("--input-format", choices=batch.INPUT_FORMATS,
                              help="default: bigquery for bq://, else jsonl")
    batch_parser.add_argument("--output", required=True,
                              help="a gs:// prefix (JSONL predictions) or bq://PROJECT[.DATASET] (a table)")
    batch_parser.add_argument("--display-name", default="vertex-llama-batch", help="the job's display name")
    _machine_flags(batch_parser)
    batch_parser.add_argument("--starting-replicas", type=int, default=1, help="replicas the job starts with")
    batch_parser.add_argument("--max-replicas", type=int, default=1, help="replicas at the most")
    batch_parser.add_argument("--batch-size", type=int, default=batch.DEFAULT_BATCH_SIZE,
                              help="rows in one predict request (1-128: each request is admitted whole)")
    batch_parser.add_argument("--service-account", help="the account the job runs as (reads the input, "
                                                        "writes the output); default: Vertex AI's")
    batch_parser.add_argument("--parameters", type=_json_arg, help="a JSON object merged into every row")
    batch_parser.add_argument("--wait", action="store_true", help="wait for the job, print progress and a summary")
    batch_parser.add_argument("--poll-seconds", type=float, default=30.0, help="how often --wait asks")


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
        parent_model=args.parent_model,
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
        accelerator_type=_accelerator_type(args),
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
        timeout = endpoint.client_connection_config.inference_timeout.total_seconds() if dedicated else 60
    else:
        traffic = rollout.split_with_new({}, [], args.traffic)
        endpoint, dedicated, timeout = None, spec.wants_dedicated, spec.timeout_s
    problem = limits.kind_mismatch(limits.model_env(model), dedicated, int(timeout or 600))
    if problem:
        print(f"warning: {problem}", file=sys.stderr)
    if endpoint is None:
        endpoint = vertex.create_endpoint(deploy.create_endpoint_request(target, spec))
    print(f"endpoint {endpoint.name}\n  {status.console_url(target, endpoint.name)}", file=sys.stderr)
    wait_s = operations.deployment_wait_seconds(model.container_spec.deployment_timeout.total_seconds()
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

    plan = doctor.Plan(args.machine_type, _accelerator_type(args), args.accelerator_count, args.ctx_size,
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
        accelerator_type=_accelerator_type(args),
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
