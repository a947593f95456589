"""``python -m gcp``'s command line: each command's flags (``build_parser``) and the values the flags
share with the commands (``SETTING_FLAGS``, ``accelerator_type``). The commands themselves are in cli.py."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gcp import batch, deploy, doctor, rollout

# Container settings a deployment commonly sets, as the LLAMA_ARG_* variables the container reads.
SETTING_FLAGS = {
    "ctx_size": ("--ctx-size", "LLAMA_ARG_CTX_SIZE"),
    "parallel": ("--parallel", "LLAMA_ARG_N_PARALLEL"),
    "n_gpu_layers": ("--n-gpu-layers", "LLAMA_ARG_N_GPU_LAYERS"),
    "alias": ("--alias", "LLAMA_ARG_ALIAS"),
    "metrics": ("--metrics", "LLAMA_ARG_ENDPOINT_METRICS"),
    "predictions_format": ("--predictions-format", "LLAMA_ARG_PREDICTIONS_FORMAT"),
    "grpc_port": ("--grpc-port", "LLAMA_ARG_GRPC_PORT"),  # also the container spec's grpcPorts
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


def accelerator_type(args: argparse.Namespace) -> str | None:
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
    from gcp import cli  # its docstring is the usage; cli imports this module first

    parser = argparse.ArgumentParser(prog="python -m gcp", description=cli.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_upload(commands)
    _add_deploy(commands)
    _add_rollout(commands)
    _add_doctor(commands)
    _add_status(commands)
    _add_requests(commands)
    _add_undeploy(commands)
    _add_batch_parser(commands)
    return parser


def _add_upload(commands: Any) -> None:
    """The register the container and the model with Vertex AI."""
    upload = commands.add_parser("upload", help="register the container and the model with Vertex AI",
                                 formatter_class=DefaultsHelpFormatter)
    _common(upload)
    upload.add_argument("--image", required=True, help="the container image URI (Artifact Registry)")
    upload.add_argument("--display-name", default="vertex-llama", help="the Model's display name")
    upload.add_argument("--artifact-uri", help="gs:// directory holding the .gguf (becomes AIP_STORAGE_URI); "
                        "one holding several models is served as a router")
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


def _add_deploy(commands: Any) -> None:
    """The deploy an uploaded model to an endpoint."""
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


def _add_rollout(commands: Any) -> None:
    """The traffic and rollback: an endpoint's split."""
    for name, help_text in (("traffic", "set an endpoint's traffic split"),
                            ("rollback", "give all traffic back to the model deployed before the newest")):
        command = commands.add_parser(name, help=help_text, description=rollout.__doc__,
                                      formatter_class=DefaultsHelpFormatter)
        _common(command)
        command.add_argument("--endpoint", required=True, help="the endpoint id or resource name")
        if name == "traffic":
            command.add_argument("--split", required=True, metavar="ID=PERCENT,...",
                                 help="every deployed model's percent, 100 in all (unnamed models get 0)")


def _add_doctor(commands: Any) -> None:
    """The the checks before a deploy."""
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


def _add_status(commands: Any) -> None:
    """The an endpoint's state."""
    stat = commands.add_parser("status", help="an endpoint's deployed models, replicas, traffic and running "
                                              "operations", formatter_class=DefaultsHelpFormatter)
    _common(stat)
    stat.add_argument("--endpoint", required=True, help="the endpoint id or resource name")


def _add_requests(commands: Any) -> None:
    """The predict, raw-predict, stream-raw-predict and invoke: requests to an endpoint."""
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


def _add_undeploy(commands: Any) -> None:
    """The undeploy models, and the endpoint."""
    undeploy = commands.add_parser("undeploy", help="undeploy models (and optionally delete the endpoint)",
                                   formatter_class=DefaultsHelpFormatter)
    _common(undeploy)
    undeploy.add_argument("--endpoint", required=True, help="the endpoint id or resource name")
    undeploy.add_argument("--deployed-model-id", help="default: every deployed model")
    undeploy.add_argument("--delete-endpoint", action="store_true", help="delete the endpoint afterwards")


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
