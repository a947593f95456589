"""What ``python -m gcp status`` and ``deploy`` tell about an endpoint: its console page, its deployed
models with their replicas and traffic, and the operations still running on it."""

from __future__ import annotations

from typing import Any

from google.cloud import aiplatform_v1 as v1

from gcp.deploy import Target


def console_url(target: Target, endpoint_name: str) -> str:
    endpoint_id = endpoint_name.rsplit("/", 1)[-1]
    return (f"https://console.cloud.google.com/vertex-ai/online-prediction/locations/{target.region}/endpoints/"
            f"{endpoint_id}?project={target.project}")


def endpoint_status(endpoint: v1.Endpoint, operations: list[dict[str, Any]]) -> dict[str, Any]:
    """An endpoint's deployed models, their replicas and traffic, and the operations still running."""
    return {
        "endpoint": endpoint.name,
        "display_name": endpoint.display_name,
        "dedicated": bool(endpoint.dedicated_endpoint_enabled),
        "dedicated_endpoint_dns": endpoint.dedicated_endpoint_dns or None,
        "deployed_models": [{
            "id": model.id, "display_name": model.display_name, "model": model.model,
            "available_replicas": model.status.available_replica_count,
            "min_replicas": model.dedicated_resources.min_replica_count,
            "max_replicas": model.dedicated_resources.max_replica_count,
            "traffic_percent": endpoint.traffic_split.get(model.id, 0),
        } for model in endpoint.deployed_models],
        "operations_in_flight": [{"name": op.get("name"), "type": op.get("metadata", {}).get("@type")}
                                 for op in operations],
    }
