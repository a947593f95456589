"""Batch prediction (``python -m gcp batch-predict``): a Vertex AI BatchPredictionJob runs the uploaded
model over a JSONL file, a BigQuery table or a file list, on replicas of its own, and writes the
predictions to Cloud Storage or BigQuery.

Vertex's batch workers send each replica ``{"instances": [up to batch_size rows], "parameters":
model_parameters}`` on the predict route. The container admits a predict request as a unit (one
place in ``--max-queue``, however many instances) and takes up to ``MAX_INSTANCES`` (128) instances
a request, so every batch size from 1 to 128 is admitted whole: no row is refused for load inside an
admitted request, and a full queue answers the whole request 429, which the workers retry. The
default, 64, is Vertex's own. Rows may be any instance the predict route takes: OpenAI batch rows
(``custom_id``, ``method``, ``url``, ``body``), ``@requestFormat`` instances, or the other shapes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.cloud import aiplatform_v1 as v1
from google.protobuf import json_format, struct_pb2

from app.vertex.predict import MAX_INSTANCES
from gcp.deploy import Target, machine_spec

DEFAULT_BATCH_SIZE = 64
INPUT_FORMATS = ("jsonl", "file-list", "bigquery")
DONE_STATES = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED",
               "JOB_STATE_PARTIALLY_SUCCEEDED")
GOOD_STATES = ("JOB_STATE_SUCCEEDED", "JOB_STATE_PARTIALLY_SUCCEEDED")


class BatchSpecError(ValueError):
    """A batch-predict flag that cannot make a job; the message names it."""


@dataclass(frozen=True)
class BatchSpec:
    model: str
    inputs: tuple[str, ...]  # gs:// JSONL files or file lists, or one bq:// table
    output: str  # a gs:// prefix or a bq:// project or dataset
    display_name: str = "vertex-llama-batch"
    input_format: str | None = None  # None: bigquery for bq://, else jsonl
    machine_type: str = "g2-standard-8"
    accelerator_type: str | None = "NVIDIA_L4"
    accelerator_count: int = 1
    starting_replicas: int = 1
    max_replicas: int = 1
    batch_size: int = DEFAULT_BATCH_SIZE
    service_account: str | None = None
    parameters: dict[str, Any] | None = None

    def checked(self) -> BatchSpec:
        """The spec, or BatchSpecError naming the flag that is wrong."""
        if not 1 <= self.batch_size <= MAX_INSTANCES:
            raise BatchSpecError(f"--batch-size {self.batch_size}: the container takes 1 to {MAX_INSTANCES} "
                                 "instances a request")
        if not self.inputs:
            raise BatchSpecError("--input: give at least one gs:// file or a bq:// table")
        kind = self.resolved_input_format
        if kind == "bigquery" and (len(self.inputs) != 1 or not self.inputs[0].startswith("bq://")):
            raise BatchSpecError("--input: a BigQuery input is exactly one bq://PROJECT.DATASET.TABLE")
        if kind != "bigquery" and not all(uri.startswith("gs://") for uri in self.inputs):
            raise BatchSpecError(f"--input: {kind} input is read from gs:// files")
        if not self.output.startswith(("gs://", "bq://")):
            raise BatchSpecError("--output: a gs:// prefix or a bq://PROJECT[.DATASET]")
        if not 1 <= self.starting_replicas <= self.max_replicas:
            raise BatchSpecError("--starting-replicas must be at least 1 and at most --max-replicas")
        return self

    @property
    def resolved_input_format(self) -> str:
        if self.input_format:
            return self.input_format
        return "bigquery" if self.inputs and self.inputs[0].startswith("bq://") else "jsonl"


def _struct(value: dict[str, Any]) -> struct_pb2.Value:
    return json_format.ParseDict(value, struct_pb2.Value())


def batch_request(target: Target, spec: BatchSpec) -> v1.CreateBatchPredictionJobRequest:
    spec = spec.checked()
    kind = spec.resolved_input_format
    Job = v1.BatchPredictionJob
    if kind == "bigquery":
        source = Job.InputConfig(instances_format="bigquery",
                                 bigquery_source=v1.BigQuerySource(input_uri=spec.inputs[0]))
    else:
        source = Job.InputConfig(instances_format=kind, gcs_source=v1.GcsSource(uris=list(spec.inputs)))
    if spec.output.startswith("bq://"):
        destination = Job.OutputConfig(predictions_format="bigquery",
                                       bigquery_destination=v1.BigQueryDestination(output_uri=spec.output))
    else:
        destination = Job.OutputConfig(predictions_format="jsonl",
                                       gcs_destination=v1.GcsDestination(output_uri_prefix=spec.output))
    job = Job(
        display_name=spec.display_name,
        model=target.model_name(spec.model),
        input_config=source,
        output_config=destination,
        dedicated_resources=v1.BatchDedicatedResources(
            machine_spec=machine_spec(spec.machine_type, spec.accelerator_type, spec.accelerator_count),
            starting_replica_count=spec.starting_replicas, max_replica_count=spec.max_replicas),
        manual_batch_tuning_parameters=v1.ManualBatchTuningParameters(batch_size=spec.batch_size),
    )
    if spec.service_account:
        job.service_account = spec.service_account
    if spec.parameters is not None:
        job.model_parameters = _struct(spec.parameters)
    return v1.CreateBatchPredictionJobRequest(parent=target.parent, batch_prediction_job=job)


def job_summary(job: v1.BatchPredictionJob) -> dict[str, Any]:
    """What a user wants to know of a job: its state, the rows, the errors and where the output is."""
    stats = job.completion_stats
    rows = stats.successful_count + stats.failed_count + stats.incomplete_count
    info = job.output_info
    return {
        "job": job.name,
        "state": job.state.name,
        "rows": rows,
        "successful": stats.successful_count,
        "failed": stats.failed_count,
        "incomplete": stats.incomplete_count,
        "output": info.gcs_output_directory or info.bigquery_output_table or info.bigquery_output_dataset or None,
        "error": job.error.message or None,
    }


def _progress(job: v1.BatchPredictionJob) -> None:
    summary = job_summary(job)
    print(f"{summary['state']}: {summary['successful']} rows done, {summary['failed']} failed", file=sys.stderr)


def wait_for_job(get: Callable[[], v1.BatchPredictionJob], poll_seconds: float,
                 sleep: Callable[[float], None] = time.sleep,
                 report: Callable[[v1.BatchPredictionJob], None] = _progress) -> v1.BatchPredictionJob:
    """Poll the job until it ends, reporting each change of state or progress."""
    last: tuple[Any, ...] | None = None
    while True:
        job = get()
        seen = (job.state, job.completion_stats.successful_count, job.completion_stats.failed_count)
        if seen != last:
            report(job)
            last = seen
        if job.state.name in DONE_STATES:
            return job
        sleep(poll_seconds)


class BatchJobs:
    """The job service for one project and region."""

    def __init__(self, target: Target) -> None:
        self.client = v1.JobServiceClient(**target.client_kwargs())

    def create(self, request: v1.CreateBatchPredictionJobRequest) -> v1.BatchPredictionJob:
        return self.client.create_batch_prediction_job(request=request)

    def get(self, name: str) -> v1.BatchPredictionJob:
        return self.client.get_batch_prediction_job(name=name)


def input_uris(values: Sequence[str]) -> tuple[str, ...]:
    """``--input`` values, each possibly comma-separated."""
    return tuple(uri.strip() for value in values for uri in value.split(",") if uri.strip())
