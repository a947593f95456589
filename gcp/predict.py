"""The Vertex AI predict route: ``{"instances": [...]}`` in, ``{"predictions": [...]}`` out.

Each instance names a route of the table by ``@requestFormat`` and is run concurrently on a thread
pool, so all instances reach the engine together and are decoded in the same batches. An
instance's failure becomes its own prediction (its error body); the envelope's failures are a 400.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.api import ApiReply, ApiRequest, InvalidRequestError, Route, guard
from gcp.aliases import AliasTable
from gcp.environment import VertexEnvironment

log = logging.getLogger(__name__)

MAX_INSTANCES = 128


def _instance_error(message: str) -> Any:
    return ApiReply.error(InvalidRequestError(message)).body


class PredictRoute:
    def __init__(self, routes: Sequence[Route], pool: ThreadPoolExecutor) -> None:
        self.aliases = AliasTable(routes)
        self._pool = pool

    def __call__(self, request: ApiRequest) -> ApiReply:
        body = request.json()
        if not isinstance(body, dict):
            raise InvalidRequestError("request body must be a JSON object")
        instances = body.get("instances")
        if not isinstance(instances, list):
            raise InvalidRequestError("request body must include an array field named instances")
        if len(instances) > MAX_INSTANCES:
            raise InvalidRequestError(f"instances array exceeds maximum size of {MAX_INSTANCES}")
        futures = [self._pool.submit(self._predict_one, request, instance) for instance in instances]
        return ApiReply(body={"predictions": [future.result() for future in futures]})

    def _predict_one(self, request: ApiRequest, instance: Any) -> Any:
        if not isinstance(instance, dict):
            return _instance_error("each instance must be a JSON object")
        request_format = instance.get("@requestFormat")
        if not isinstance(request_format, str):
            return _instance_error("each instance must include a string @requestFormat")
        route = self.aliases.resolve(request_format)
        if route is None:
            return _instance_error(f"no handler registered for @requestFormat: {request_format}")
        payload = {key: value for key, value in instance.items() if key != "@requestFormat"}
        if "stream" in payload:
            if payload["stream"]:
                log.warning("predict: stream forced to false for @requestFormat %s", request_format)
            payload["stream"] = False
        reply = route.handler(request.with_json(payload, path=route.path))
        if reply.stream is not None:
            close = getattr(reply.stream, "close", None)
            if close is not None:
                close()
            return _instance_error("predict route does not support streaming responses")
        if reply.body is not None:
            return reply.body
        return reply.text


def vertex_routes(
    routes: Sequence[Route], environment: VertexEnvironment, pool: ThreadPoolExecutor
) -> tuple[Route, ...]:
    """The table plus Vertex's routes: the predict route and, if ``AIP_HEALTH_ROUTE`` is set, a
    health alias. Both are built after the alias table, so neither is an alias target."""
    environment.check_routes(route.path for route in routes)
    predict = PredictRoute(routes, pool)
    for collision in predict.aliases.collisions:
        log.info("alias collision: %s", collision.describe())
    for route in predict.aliases.shadowed:
        log.info("predict: %s %s is not reachable (its path is bound to another method)", route.method, route.path)
    added = [Route("POST", environment.predict_route, "post_predict", guard(predict))]
    if environment.health_route and environment.health_route not in {route.path for route in routes}:
        health = next(route for route in routes if route.path == "/health")
        added.append(Route("GET", environment.health_route, health.name, health.handler, public=True))
    log.info(
        "Google Cloud Platform compat: health route = %s, predict route = %s, port = %s",
        environment.health_route or "/health",
        environment.predict_route,
        environment.port,
    )
    return (*routes, *added)
