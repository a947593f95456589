"""Rolling a new model version out on an endpoint and back: traffic splits.

A new version is uploaded with ``upload --parent-model`` and deployed beside the old one with
``deploy --traffic PERCENT`` (the deployed models already there keep the rest, in their
proportions); ``traffic`` sets any split, ``rollback`` gives all traffic back to the model deployed
before the newest, and ``undeploy`` moves the share of the model it removes to the ones that stay
(Vertex AI refuses to undeploy a model that still has traffic).

Scale to zero: Vertex AI offers it only in its v1beta1 API (``DedicatedResources.scaleToZeroSpec``,
a preview); this tool speaks v1, where a deployed model keeps at least one replica.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.cloud import aiplatform_v1 as v1
from google.protobuf import field_mask_pb2

from gcp import operations

NEW = "0"  # the id DeployModelRequest.traffic_split uses for the model being deployed


class TrafficError(ValueError):
    """A split that Vertex AI would refuse; the message says why."""


def share_out(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``total`` percent over ``weights`` in their proportions (equal shares when all are 0), in whole
    percents that add up to ``total`` (largest remainders first)."""
    if not weights:
        return {}
    basis = dict(weights) if any(weights.values()) else dict.fromkeys(weights, 1)
    whole = sum(basis.values())
    exact = {key: total * value / whole for key, value in basis.items()}
    split = {key: int(value) for key, value in exact.items()}
    for key in sorted(exact, key=lambda k: exact[k] - split[k], reverse=True)[:total - sum(split.values())]:
        split[key] += 1
    return split


def split_with_new(existing: Mapping[str, int], deployed_ids: list[str], percent: int) -> dict[str, int]:
    """The split when a model joins with ``percent`` of the traffic."""
    if not 1 <= percent <= 100:
        raise TrafficError(f"--traffic {percent}: a percentage from 1 to 100")
    if not deployed_ids:
        if percent != 100:
            raise TrafficError(f"--traffic {percent}: the first model on an endpoint takes all of its traffic")
        return {NEW: 100}
    others = share_out(100 - percent, {model_id: existing.get(model_id, 0) for model_id in deployed_ids})
    return {NEW: percent, **others}


def split_without(existing: Mapping[str, int], deployed_ids: list[str], removed: str) -> dict[str, int]:
    """The split once ``removed`` is undeployed: its share goes to the others (empty when none stay)."""
    staying = {model_id: existing.get(model_id, 0) for model_id in deployed_ids if model_id != removed}
    return share_out(100, staying)


def parse_split(text: str, deployed_ids: list[str]) -> dict[str, int]:
    """``ID=PERCENT,ID=PERCENT``: every deployed model named at most once, 100 in all."""
    split: dict[str, int] = {}
    for part in filter(None, (item.strip() for item in text.split(","))):
        model_id, sep, percent = part.partition("=")
        if not sep or not percent.strip().isdigit():
            raise TrafficError(f"--split: {part!r} is not DEPLOYED_MODEL_ID=PERCENT")
        if model_id not in deployed_ids:
            raise TrafficError(f"--split: {model_id} is not deployed on this endpoint ({', '.join(deployed_ids)})")
        split[model_id] = int(percent)
    if sum(split.values()) != 100:
        raise TrafficError(f"--split: the percentages add up to {sum(split.values())}, not 100")
    return {model_id: split.get(model_id, 0) for model_id in deployed_ids}


def rollback_split(endpoint: v1.Endpoint) -> dict[str, int]:
    """All traffic to the model deployed before the newest one."""
    models = sorted(endpoint.deployed_models, key=lambda model: operations.instant(model.create_time))
    if len(models) < 2:
        raise TrafficError(f"{endpoint.name} has {len(models)} deployed model(s): nothing to roll back to")
    previous = models[-2].id
    return {model.id: 100 if model.id == previous else 0 for model in models}


def traffic_request(endpoint_name: str, split: Mapping[str, int]) -> v1.UpdateEndpointRequest:
    return v1.UpdateEndpointRequest(endpoint=v1.Endpoint(name=endpoint_name, traffic_split=dict(split)),
                                    update_mask=field_mask_pb2.FieldMask(paths=["traffic_split"]))
