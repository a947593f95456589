"""Vertex AI's limits per endpoint kind, which the container cannot tell from its environment: the
settings that keep its answers within them (``upload --endpoint-kind``), and the warning when a model
goes to an endpoint of the other kind."""

from __future__ import annotations

from google.cloud import aiplatform_v1 as v1

DEDICATED_TIMEOUT_THRESHOLD_S = 60  # a shared endpoint cuts requests here; a longer timeout needs a dedicated one
SHARED_RESPONSE_BYTES = 1_572_864  # a shared endpoint refuses a larger response
SHARED_DEADLINE_S = 55  # a shared endpoint cuts a request at 60 s
DEDICATED_RESPONSE_BYTES = 10 * 1024 * 1024
DEADLINE_MARGIN_S = 5


def endpoint_limits(kind: str, inference_timeout_s: int = 600) -> dict[str, str]:
    """The container settings that keep its answers within the endpoint's limits: a generation
    deadline under the endpoint's time limit, and the largest predict answer."""
    if kind == "shared":
        return {"LLAMA_ARG_PREDICT_DEADLINE": str(SHARED_DEADLINE_S),
                "LLAMA_ARG_MAX_RESPONSE_BYTES": str(SHARED_RESPONSE_BYTES)}
    if kind == "dedicated":
        return {"LLAMA_ARG_PREDICT_DEADLINE": str(max(1, inference_timeout_s - DEADLINE_MARGIN_S)),
                "LLAMA_ARG_MAX_RESPONSE_BYTES": str(DEDICATED_RESPONSE_BYTES)}
    raise ValueError(f"unknown endpoint kind {kind!r}: shared or dedicated")


def model_env(model: v1.Model) -> dict[str, str]:
    return {item.name: item.value for item in model.container_spec.env}


def kind_mismatch(model_env: dict[str, str], dedicated: bool, timeout_s: int) -> str | None:
    """Why a model's limits (``upload --endpoint-kind``) do not fit the endpoint it goes to; None
    when they do, or when the model declared none."""
    raw = model_env.get("LLAMA_ARG_PREDICT_DEADLINE")
    try:
        deadline = float(raw) if raw else 0.0
    except ValueError:
        return None
    if deadline <= 0:
        return None
    limit = timeout_s if dedicated else DEDICATED_TIMEOUT_THRESHOLD_S
    kind = "dedicated" if dedicated else "shared"
    if deadline >= limit:
        return (f"the model ends generations at {deadline:g} s (LLAMA_ARG_PREDICT_DEADLINE), but this {kind} "
                f"endpoint cuts requests at {limit} s: upload it again with --endpoint-kind {kind}")
    if dedicated and deadline <= SHARED_DEADLINE_S < limit - DEADLINE_MARGIN_S:
        return (f"the model was uploaded for a shared endpoint (generations end at {deadline:g} s), but this "
                f"dedicated endpoint allows {limit} s: upload it again with --endpoint-kind dedicated "
                f"--inference-timeout {limit} to use them")
    return None
