"""The router's route table: llama-server's table with every model route refilled by a proxy (POST routes
by the body's ``model``, GET routes by ``?model=``), and the router's own routes: ``/health``, ``/props``,
``/models`` (and ``/v1/models``), ``/models/load`` and ``/models/unload``."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from app.protocol.api import ApiReply, ApiRequest, Handler, Route, guard
from app.protocol.errors import InvalidRequestError, NotFoundError, UnavailableError
from app.protocol.openapi import openapi_document
from app.protocol.stream_sessions import HEADER as CONVERSATION_HEADER
from app.router.catalog import ModelEntry
from app.router.models import ModelState, RouterModels
from app.router.proxy import forward

STREAM_PATHS = ("/v1/stream",)
MAX_CONVERSATIONS = 4096
OWN_GET = {"/health", "/v1/health", "/props", "/models", "/v1/models"}


class Conversations:
    """Which model serves each resumable stream (``X-Conversation-Id``), for ``/v1/stream``."""

    def __init__(self) -> None:
        self._models: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, conversation: str, model: str) -> None:
        with self._lock:
            self._models[conversation] = model
            self._models.move_to_end(conversation)
            while len(self._models) > MAX_CONVERSATIONS:
                self._models.popitem(last=False)

    def model_of(self, conversation: str) -> str | None:
        with self._lock:
            return self._models.get(conversation)


class Releasing:
    """A relayed stream that gives its model's request back when it ends or is closed, even unread."""

    def __init__(self, stream: Iterator[bytes], release: Callable[[], None]) -> None:
        self._stream, self._release, self._released = stream, release, False

    def __iter__(self) -> Releasing:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._stream)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()
        if not self._released:
            self._released = True
            self._release()


def autoload(request: ApiRequest, default: bool) -> bool:
    value = request.params.get("autoload", "")
    return default if not value else value in ("true", "1")


class Router:
    """The handlers of the router's routes, over its models."""

    def __init__(self, models: RouterModels, models_max: int, autoload_default: bool, on_vertex: bool,
                 rescan: Callable[[], dict[str, ModelEntry]], build_info: str, route_prefix: str = "",
                 agent_props: Mapping[str, bool] | None = None) -> None:
        self.models = models
        self._agent_props = dict(agent_props or {"cors_proxy_enabled": False, "tools_enabled": False})
        self._max = models_max
        self._autoload = autoload_default
        self._on_vertex = on_vertex
        self._rescan = rescan
        self._build_info = build_info
        self.conversations = Conversations()
        self.routes: tuple[Route, ...] = ()  # the whole table, once built (for /openapi.json)
        self._prefix = route_prefix

    # ---- forwarding ----------------------------------------------------------------------------

    def _model_named(self, name: Any) -> str:
        if not isinstance(name, str) or not name:
            raise InvalidRequestError("model name is missing from the request")
        self.models.require(name)
        return name

    def _forward_to(self, name: str, request: ApiRequest) -> ApiReply:
        child = self.models.acquire(name, autoload(request, self._autoload), request.should_stop)
        try:
            reply = forward(child, request)
        except BaseException:
            self.models.release(name)
            raise
        if reply.raw_stream is None:
            self.models.release(name)
            return reply
        return dataclasses.replace(reply, raw_stream=Releasing(reply.raw_stream, lambda: self.models.release(name)))

    def proxy_post(self, request: ApiRequest) -> ApiReply:
        name = self._model_named(request.json_object().get("model"))
        conversation = request.headers.get(CONVERSATION_HEADER, "")
        if conversation:
            self.conversations.remember(conversation, name)
        return self._forward_to(name, request)

    def proxy_get(self, request: ApiRequest) -> ApiReply:
        return self._forward_to(self._model_named(request.params.get("model", "")), request)

    def proxy_stream(self, request: ApiRequest) -> ApiReply:
        """``/v1/stream``: to the model that serves the conversation (or the one ``?model=`` names)."""
        name = request.params.get("model") or self.conversations.model_of(request.params.get("conv_id", ""))
        if not name:
            if not request.params.get("conv_id"):
                raise InvalidRequestError("Missing conversation id in path")
            raise NotFoundError("Stream not found or expired")
        return self._forward_to(self._model_named(name), request)

    # ---- the router's own routes ---------------------------------------------------------------

    def health(self, request: ApiRequest) -> ApiReply:
        """200 once the router listens (llama-server's router); on Vertex AI only while a model is loaded."""
        if self._on_vertex and not self.models.any_loaded():
            raise UnavailableError("Loading model")
        return ApiReply(body={"status": "ok"})

    def live(self, request: ApiRequest) -> ApiReply:
        """The router's process serves (each child has its own liveness, which the router does not mirror)."""
        return ApiReply(body={"status": "ok"})

    def props(self, request: ApiRequest) -> ApiReply:
        if request.params.get("model"):
            return self.proxy_get(request)
        return ApiReply(body={
            "role": "router",
            "max_instances": self._max,
            "models_autoload": self._autoload,
            "model_alias": "llama-server",
            "model_path": "none",
            "default_generation_settings": {"params": {}, "n_ctx": 0},
            "ui_settings": {},
            "build_info": self._build_info,
            **self._agent_props,  # the router runs agent mode itself
        })

    def openapi(self, request: ApiRequest) -> ApiReply:
        return ApiReply(body=openapi_document(self.routes, self._prefix))

    def list_models(self, request: ApiRequest) -> ApiReply:
        if request.params.get("reload"):
            self.models.replace_catalog(self._rescan())
        now = int(time.time())
        return ApiReply(body={"data": [model_info(state, now) for state in self.models.snapshot()],
                              "object": "list"})

    def load(self, request: ApiRequest) -> ApiReply:
        name = request.json_object().get("model")
        if not isinstance(name, str) or self.models.state(name) is None:
            raise NotFoundError("model is not found")
        self.models.load(name)
        return ApiReply(body={"success": True})

    def unload(self, request: ApiRequest) -> ApiReply:
        name = request.json_object().get("model")
        if not isinstance(name, str) or self.models.state(name) is None:
            raise InvalidRequestError("model is not found")
        self.models.unload(name)
        return ApiReply(body={"success": True})


def model_info(state: ModelState, now: int) -> dict[str, Any]:
    """A model in ``GET /models``, as llama-server's router lists it (the child's own entry merged in)."""
    status: dict[str, Any] = {"value": state.status, "args": state.args}
    if state.status == "loaded" and state.child is not None:
        props = state.child.get_json("/props", timeout=1.0)
        if isinstance(props, dict) and props.get("is_sleeping"):
            status["value"] = "sleeping"
    if state.entry.preset_text:
        status["preset"] = state.entry.preset_text
    if state.failed:
        status["exit_code"] = state.exit_code
        status["failed"] = True
    projector = "--mmproj" in state.entry.model_argv
    info: dict[str, Any] = {
        "id": state.entry.name, "aliases": [], "tags": [], "object": "model", "owned_by": "llamacpp",
        "created": now, "status": status,
        "architecture": {"input_modalities": ["text", "image"] if projector else ["text"],
                         "output_modalities": ["text"]},
        "source": state.entry.source, "can_remove": False, "path": state.entry.path,
    }
    if state.running:
        for key, value in state.info.items():
            info.setdefault(key, value)
    return info


def router_routes(template: Sequence[Route], router: Router) -> tuple[Route, ...]:
    """``template`` (llama-server's table) with each route's handler replaced, plus the router's own."""
    own_get: dict[str, Handler] = {"/health": router.health, "/v1/health": router.health, "/live": router.live,
                                   "/props": router.props,
                                   "/models": router.list_models, "/v1/models": router.list_models,
                                   "/openapi.json": router.openapi}

    def handler_for(route: Route) -> Handler:
        if route.method == "GET" and route.path in own_get:
            return own_get[route.path]
        if route.path in STREAM_PATHS:
            return router.proxy_stream
        return router.proxy_post if route.method == "POST" else router.proxy_get

    routes = [route if route.local else dataclasses.replace(route, handler=guard(handler_for(route)))
              for route in template]
    routes += [
        Route("POST", "/models/load", "post_router_models_load", guard(router.load), summary="load a model"),
        Route("POST", "/models/unload", "post_router_models_unload", guard(router.unload),
              summary="unload a model"),
    ]
    return tuple(routes)
