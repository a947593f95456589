"""The Vertex AI predict route, for every way Vertex clients call a container.

- ``:predict``: ``{"instances": [...], "parameters": {...}}`` in, ``{"predictions": [...]}`` out.
  Each instance names a route of the table by ``@requestFormat``, or is an OpenAI batch row
  (``custom_id``, ``url``, ``body``: app/vertex/openai_batch.py), or is routed by its shape, as other
  Vertex containers take it (app/vertex/shapes.py); that is the precedence. Instances run concurrently on
  a thread pool, so all instances reach the engine together and are decoded in the same batches.
  ``parameters`` is merged into every instance (the instance's own keys win), and integral floats
  become integers (Vertex carries JSON through protobuf ``Value``, whose only number is a double).
  An instance's failure becomes its own prediction (its error body); envelope failures are a 400.
  The request is admitted as a unit (one place in the engine's queue): once admitted, every
  instance waits for a slot and none is refused for load; a full queue refuses the whole request
  (429 with Retry-After), never a mix of predictions and refusals.
  With ``--predictions-format model-garden``, a request of exactly one instance for the chat completion
  route (``@requestFormat: chatCompletions`` or a ``messages`` instance) is answered as Model Garden's vLLM
  container answers it: ``{"predictions": <the chat completion object>}``, or the route's own error status
  and body.
- ``:rawPredict``: any other JSON object goes to the default route (``--predict-default-route``)
  and is answered exactly as that route answers.
- ``:streamRawPredict``: a raw body with ``stream: true``, or an envelope of exactly one instance
  with ``stream: true``, is answered with that route's server-sent event stream.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict

from app.protocol.api import ApiReply, ApiRequest, InvalidRequestError, Route, guard
from app.vertex.aliases import AliasTable
from app.vertex.environment import VertexEnvironment
from app.vertex.openai_batch import BatchRow, BatchRowError, batch_answer, batch_failure, is_batch_row
from app.vertex.shapes import Shape, shape_of

log = logging.getLogger(__name__)

MAX_INSTANCES = 128
METRICS_PATH = "/metrics"
CHAT_PATH = "/v1/chat/completions"
MODEL_GARDEN = "model-garden"
ALIASES_PATH = "/vertex/aliases"


class PredictBody(BaseModel):
    """Vertex AI's envelope; a body without ``instances`` is a raw predict for the default route."""

    model_config = ConfigDict(extra="allow")
    instances: list[Any] | None = None
    parameters: dict[str, Any] | None = None


def _instance_error(message: str) -> Any:
    return ApiReply.error(InvalidRequestError(message)).body


def integral_floats_to_ints(value: Any) -> Any:
    """``16.0`` -> ``16`` all through a JSON value (a float field still accepts the integer)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [integral_floats_to_ints(item) for item in value]
    if isinstance(value, dict):
        return {key: integral_floats_to_ints(item) for key, item in value.items()}
    return value


Admission = Callable[[], AbstractContextManager[None]]


class PredictRoute:
    def __init__(self, routes: Sequence[Route], pool: ThreadPoolExecutor, default_route: str,
                 admit: Admission = nullcontext, max_response_bytes: int = 0,
                 predictions_format: str = "llama-server") -> None:
        """``admit`` admits the instances of one request as a unit (the engine's queue place), or
        raises the error that refuses the whole request; the instances run in copies of its context."""
        self.aliases = AliasTable(routes)
        chat = self.aliases.by_path.get(CHAT_PATH)
        self._object_for = chat.name if chat is not None and predictions_format == MODEL_GARDEN else None
        self._pool = pool
        self._admit = admit
        self._max_response_bytes = max_response_bytes
        default = self.aliases.resolve(default_route)
        if default is None:
            raise ValueError(f"--predict-default-route {default_route!r} is not a route of this server")
        self.default = default

    def __call__(self, request: ApiRequest) -> ApiReply:
        body = request.json()
        if not isinstance(body, dict):
            raise InvalidRequestError("request body must be a JSON object")
        if "instances" not in body:
            return self.default.handler(request.with_json(body, path=self.default.path))
        instances = body["instances"]
        if not isinstance(instances, list):
            raise InvalidRequestError("request body must include an array field named instances")
        if len(instances) > MAX_INSTANCES:
            raise InvalidRequestError(f"instances array exceeds maximum size of {MAX_INSTANCES}")
        parameters = body.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise InvalidRequestError("parameters must be a JSON object")
        streaming = [isinstance(i, dict) and bool({**parameters, **i}.get("stream")) for i in instances]
        if any(streaming):
            if len(instances) != 1:
                raise InvalidRequestError("streaming takes exactly one instance; "
                                          f"this request has {len(instances)} with stream: true")
            return self._stream_one(request, {**parameters, **instances[0]})
        if self._object_for is not None and len(instances) == 1:
            single = self._model_garden_chat(request, instances[0], parameters)
            if single is not None:
                return single
        with self._admit():
            futures = [self._pool.submit(contextvars.copy_context().run, self._predict_one, request, instance,
                                         parameters) for instance in instances]
            return self._within_limit(ApiReply(body={"predictions": [future.result() for future in futures]}))

    def _model_garden_chat(self, request: ApiRequest, instance: Any, parameters: dict[str, Any]) -> ApiReply | None:
        """Model Garden vLLM's answer to one chat-completion instance: the object as ``predictions``, or
        the route's error as the request's (None: the instance is not for the chat route)."""
        if not isinstance(instance, dict) or ("@requestFormat" not in instance and is_batch_row(instance)):
            return None
        instance = {**parameters, **instance}
        route, shape, _ = self._resolve(instance)
        if route is None or route.name != self._object_for:
            return None
        with self._admit():
            reply = self._call(request, route, self._payload(instance, shape))
        if reply.status >= 400 or reply.body is None:
            return reply
        return self._within_limit(ApiReply(body={"predictions": reply.body}))

    def _within_limit(self, reply: ApiReply) -> ApiReply:
        """A predict answer over --max-response-bytes is an error that says so, not a body that the
        endpoint would refuse with a message that never mentions this container."""
        if not self._max_response_bytes:
            return reply
        size = len(json.dumps(reply.body, ensure_ascii=False, separators=(",", ":")).encode())
        if size <= self._max_response_bytes:
            return reply
        raise InvalidRequestError(
            f"the predictions take {size} bytes, over --max-response-bytes {self._max_response_bytes} (a shared "
            "Vertex AI endpoint answers at most 1.5 MB): send fewer instances a request, or deploy to a "
            "dedicated endpoint")

    def _resolve(self, instance: dict[str, Any]) -> tuple[Route | None, Shape | None, str | None]:
        """The route that answers the instance, the shape it came in (None: ``@requestFormat``), or
        why there is none."""
        request_format = instance.get("@requestFormat")
        if request_format is None:
            shape = shape_of(instance)
            if shape is not None:
                return self.aliases.resolve(shape.path), shape, None
            return None, None, "each instance must include a string @requestFormat"
        if not isinstance(request_format, str):
            return None, None, "each instance must include a string @requestFormat"
        route = self.aliases.resolve(request_format)
        if route is None:
            return None, None, f"no handler registered for @requestFormat: {request_format}"
        return route, None, None

    def _payload(self, instance: dict[str, Any], shape: Shape | None) -> dict[str, Any]:
        payload = {key: value for key, value in instance.items() if key != "@requestFormat"}
        payload = integral_floats_to_ints(payload)
        return shape.request(payload) if shape is not None else payload

    def _stream_one(self, request: ApiRequest, instance: dict[str, Any]) -> ApiReply:
        route, shape, problem = self._resolve(instance)
        if route is None:
            raise InvalidRequestError(problem or "no route")
        if shape is not None and shape.key != "messages":
            raise InvalidRequestError(f"streaming takes an instance with @requestFormat or messages, not {shape.key}")
        return route.handler(request.with_json(self._payload(instance, shape), path=route.path))

    def _predict_one(self, request: ApiRequest, instance: Any, parameters: dict[str, Any]) -> Any:
        if not isinstance(instance, dict):
            return _instance_error("each instance must be a JSON object")
        if "@requestFormat" not in instance and is_batch_row(instance):
            return self._batch_row(request, instance, parameters)
        instance = {**parameters, **instance}
        route, shape, problem = self._resolve(instance)
        if route is None:
            return _instance_error(problem or "no route")
        reply = self._call(request, route, self._payload(instance, shape))
        if reply.body is not None:
            failed = reply.status >= 400
            return shape.prediction(instance, reply.body) if shape is not None and not failed else reply.body
        return reply.text

    def _batch_row(self, request: ApiRequest, instance: dict[str, Any], parameters: dict[str, Any]) -> Any:
        """An OpenAI batch row (app/vertex/openai_batch.py): ``parameters`` go into its body (the body's own
        keys win), and the answer is an OpenAI batch output line."""
        try:
            row = BatchRow.parse(instance)
            route = self.aliases.by_path.get(row.path)
            if route is None:
                raise BatchRowError("invalid_url", f"no route {row.path} on this server")
            if route.method != row.method:
                raise BatchRowError("invalid_method", f"{row.path} takes {route.method}, not {row.method}")
        except BatchRowError as exc:
            return batch_failure(instance["custom_id"], exc)
        reply = self._call(request, route, integral_floats_to_ints({**parameters, **row.body}))
        return batch_answer(row.custom_id, reply.status, reply.body if reply.body is not None else reply.text)

    def _call(self, request: ApiRequest, route: Route, payload: dict[str, Any]) -> ApiReply:
        """One instance's request to its route, never streamed (a stream is closed and refused)."""
        if "stream" in payload:
            payload = {**payload, "stream": False}
        reply = route.handler(request.with_json(payload, path=route.path))
        if reply.stream is not None:
            close = getattr(reply.stream, "close", None)
            if close is not None:
                close()
            return ApiReply.error(InvalidRequestError("predict route does not support streaming responses"))
        return reply


def alias_listing(predict: PredictRoute, environment: VertexEnvironment) -> Callable[[ApiRequest], ApiReply]:
    """``GET /vertex/aliases``: what an instance may name, for the web UI's predict console and for
    anyone composing instances (public: it tells only the route table, which /openapi.json tells too)."""
    body = {
        "predict_route": environment.predict_route,
        "default_route": predict.default.path,
        "max_instances": MAX_INSTANCES,
        **predict.aliases.listing(),
    }

    def get_vertex_aliases(request: ApiRequest) -> ApiReply:
        return ApiReply(body=body)

    return get_vertex_aliases


SLOTS_PATH = "/slots"


def vertex_routes(
    routes: Sequence[Route],
    environment: VertexEnvironment,
    pool: ThreadPoolExecutor,
    default_route: str = "/v1/chat/completions",
    admit: Admission = nullcontext,
    max_response_bytes: int = 0,
    predict_slots: bool = False,
    predictions_format: str = "llama-server",
) -> tuple[Route, ...]:
    """The table plus Vertex's routes: the predict route and, if ``AIP_HEALTH_ROUTE`` is set, a
    health alias. Both are built after the alias table, so neither is an alias target. A predict
    instance reaches ``/slots`` (the view and the slot actions) only with ``predict_slots``
    (``--predict-slots``): a predict caller is anyone who may call the endpoint, and the slots are
    every user's."""
    environment.check_routes(route.path for route in routes)
    # Vertex AI's metrics scraper sends no API key.
    routes = tuple(replace(route, public=True) if route.path == METRICS_PATH else route for route in routes)
    reachable = tuple(route for route in routes if predict_slots or not route.path.startswith(SLOTS_PATH))
    predict = PredictRoute(reachable, pool, default_route, admit, max_response_bytes, predictions_format)
    for collision in predict.aliases.collisions:
        log.info("alias collision: %s", collision.describe())
    for route in predict.aliases.shadowed:
        log.info("predict: %s %s is not reachable (its path is bound to another method)", route.method, route.path)
    added = [Route("POST", environment.predict_route, "post_predict", guard(predict), body=PredictBody, streams=True,
                   summary="Vertex AI predict: instances to predictions (also rawPredict, streamRawPredict)")]
    if ALIASES_PATH not in {environment.predict_route, environment.health_route}:
        added.append(Route("GET", ALIASES_PATH, "get_vertex_aliases", guard(alias_listing(predict, environment)),
                           public=True, summary="Vertex AI: the @requestFormat alias table of the predict route"))
    if environment.health_route and environment.health_route not in {route.path for route in routes}:
        health = next(route for route in routes if route.path == "/health")
        added.append(replace(health, path=environment.health_route, public=True))  # the checker has no key
    log.info(
        "Google Cloud Platform compat: health route = %s, predict route = %s, port = %s",
        environment.health_route or "/health",
        environment.predict_route,
        environment.port,
    )
    return (*routes, *added)
