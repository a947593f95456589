"""``vertex_llama.v1.Llama``: each method calls the handler of the HTTP route it mirrors, with the same
rules as the HTTP side (the loading and shutdown gates, the API key from ``authorization`` or
``x-api-key`` metadata). An error answer becomes the gRPC status for its HTTP status, its message the
error's, and the whole llama-server error body rides in the ``error-json`` trailing metadata. A call whose
deadline passes or whose client goes away stops its generation, as a closed HTTP connection does."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from functools import partial
from typing import Any, NoReturn

import grpc
from google.protobuf import json_format, struct_pb2

from app.protocol.api import ApiReply, ApiRequest, Idle, Route
from app.protocol.errors import AuthenticationError, UnavailableError, error_body
from app.protocol.keys import key_is_valid, presented_key
from app.rpc.descriptors import CHAT_PATH, METHODS, PREDICT, SERVICE_NAME, Method
from app.vertex.predict import integral_floats_to_ints

log = logging.getLogger(__name__)

PREDICT_ROUTE_NAME = "post_predict"
STATUS_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 401: grpc.StatusCode.UNAUTHENTICATED,
                403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND,
                408: grpc.StatusCode.DEADLINE_EXCEEDED, 413: grpc.StatusCode.RESOURCE_EXHAUSTED,
                429: grpc.StatusCode.RESOURCE_EXHAUSTED, 501: grpc.StatusCode.UNIMPLEMENTED,
                503: grpc.StatusCode.UNAVAILABLE, 504: grpc.StatusCode.DEADLINE_EXCEEDED}


def status_code(http_status: int) -> grpc.StatusCode:
    default = grpc.StatusCode.INVALID_ARGUMENT if http_status < 500 else grpc.StatusCode.INTERNAL
    return STATUS_CODES.get(http_status, default)


def to_struct(value: Any) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value if isinstance(value, dict) else {"result": value})
    return message


def _abort(context: grpc.ServicerContext, status: int, body: Any) -> NoReturn:
    error = body.get("error") if isinstance(body, dict) else None
    message = str(error.get("message", "")) if isinstance(error, dict) else json.dumps(body)
    context.set_trailing_metadata((("error-json", json.dumps(body, ensure_ascii=False)),))
    context.abort(status_code(status), message)
    raise AssertionError("unreachable: abort raises")  # for the type checker


def _abort_with(context: grpc.ServicerContext, exc: BaseException) -> NoReturn:
    status, body = error_body(exc)
    _abort(context, status, body)


class LlamaService:
    def __init__(self, routes: Sequence[Route], api_keys: Collection[str], is_ready: Callable[[], bool],
                 is_draining: Callable[[], bool]) -> None:
        posts = {route.path: route for route in routes if route.method == "POST"}
        predict = next((route for route in routes if route.name == PREDICT_ROUTE_NAME), None)
        self._routes = {method.name: predict if method.path == PREDICT else posts.get(method.path)
                        for method in METHODS}
        self._api_keys = tuple(api_keys)
        self._is_ready = is_ready
        self._is_draining = is_draining

    def generic_handler(self) -> grpc.GenericRpcHandler:
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        for method in METHODS:
            make = grpc.unary_stream_rpc_method_handler if method.streams else grpc.unary_unary_rpc_method_handler
            handlers[method.name] = make(partial(self._stream if method.streams else self._unary, method),
                                         request_deserializer=struct_pb2.Struct.FromString,
                                         response_serializer=struct_pb2.Struct.SerializeToString)
        return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)

    def _gate(self, context: grpc.ServicerContext) -> dict[str, str]:
        """The HTTP side's middleware, in its order; the metadata as headers."""
        if self._is_draining():
            _abort_with(context, UnavailableError("the server is shutting down"))
        if not self._is_ready():
            _abort_with(context, UnavailableError("Loading model"))
        metadata = {key.lower(): value for key, value in context.invocation_metadata()
                    if isinstance(value, str) and not key.endswith("-bin")}
        if self._api_keys and not key_is_valid(
                presented_key(metadata.get("authorization", ""), metadata.get("x-api-key", "")), self._api_keys):
            _abort_with(context, AuthenticationError())
        return {"-".join(part.capitalize() for part in key.split("-")): value for key, value in metadata.items()
                if key not in ("authorization", "x-api-key")}

    def _call(self, method: Method, message: struct_pb2.Struct, context: grpc.ServicerContext) -> ApiReply:
        headers = self._gate(context)
        route = self._routes[method.name]
        if route is None:
            why = ("Predict needs the predict route: run with AIP_MODE=PREDICTION" if method.path == PREDICT
                   else f"this server has no {method.path}")
            context.abort(grpc.StatusCode.UNIMPLEMENTED, why)
        body = integral_floats_to_ints(json_format.MessageToDict(message))
        if method.path == CHAT_PATH:
            body["stream"] = method.streams
        ended = threading.Event()  # the call ended: its deadline passed, or the client cancelled or went away
        if not context.add_callback(ended.set):
            ended.set()
        request = ApiRequest("POST", route.path, headers=headers, should_stop=ended.is_set)
        reply = route.handler(request.with_json(body))
        log.debug("grpc %s: %d", method.full_name, reply.status)
        if reply.status >= 400:
            _abort(context, reply.status, reply.body if reply.body is not None else {"error": {"message": reply.text}})
        return reply

    def _unary(self, method: Method, message: struct_pb2.Struct, context: grpc.ServicerContext) -> struct_pb2.Struct:
        reply = self._call(method, message, context)
        if reply.stream is not None or reply.raw_stream is not None:
            _close(reply)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"this request streams: call Stream{method.name}")
        return to_struct(reply.body if reply.body is not None else reply.text)

    def _stream(self, method: Method, message: struct_pb2.Struct, context: grpc.ServicerContext
                ) -> Iterator[struct_pb2.Struct]:
        """Each event's JSON as one message (``[DONE]`` is the end of the call); an answer that does
        not stream is the one message."""
        reply = self._call(method, message, context)
        if reply.stream is None:
            yield to_struct(reply.body if reply.body is not None else reply.text)
            return
        failure: tuple[int, Any] | None = None
        try:
            for event in reply.stream:
                if isinstance(event, Idle) or not isinstance(event.data, dict):  # pings are HTTP's
                    continue
                if set(event.data) == {"error"} and isinstance(event.data["error"], dict):
                    failure = int(event.data["error"].get("code", 500)), event.data
                    break
                yield to_struct(event.data)
        except Exception as exc:  # an error in the middle of the stream, as the HTTP side sends it
            failure = error_body(exc)
        finally:
            _close(reply)
        if failure is not None:
            _abort(context, *failure)


def _close(reply: ApiReply) -> None:
    for stream in (reply.stream, reply.raw_stream):
        close = getattr(stream, "close", None)
        if close is not None:
            close()
