"""GET and POST /tools: the web UI's agent calls the server's tools here (llama-server's internal API, its
README-dev.md). Off (no --tools, -ag or MCP server) both answer 403 ``feature_disabled``, as llama-server."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from app.agent.tool import InvalidParams, Tool
from app.agent.tool_io import OutsideRoot, ToolError
from app.agent.toolbox import Toolbox, UnknownTool
from app.handlers.context import ServerContext
from app.protocol.api import ApiReply, ApiRequest, SseEvent
from app.protocol.errors import FeatureDisabledError, InvalidRequestError, NotFoundError, PermissionDeniedError

_DONE = object()


@dataclass(frozen=True)
class Where:
    """What a call's headers say: x-tool-cwd, x-tool-runtime (an isolate), x-resp-type (read_file's base64)."""

    cwd: str
    runtime: str
    resp_type: str


def header(headers: Mapping[str, str], name: str) -> str:
    """A request header, whatever its case."""
    wanted = name.lower()
    return next((value for key, value in headers.items() if key.lower() == wanted), "")


def _toolbox(ctx: ServerContext) -> Toolbox:
    if ctx.agent.toolbox is None:
        raise FeatureDisabledError()
    return ctx.agent.toolbox


def get_tools(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    """list the server's tools (built-in and MCP) for the web UI's agent"""
    return ApiReply(body=_toolbox(ctx).listing())


def post_tools(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    """call one of the server's tools (x-tool-cwd, x-tool-runtime, x-resp-type headers; stream: true streams)"""
    toolbox = _toolbox(ctx)
    body = request.json_object()
    name, params, stream = body.get("tool"), body.get("params", {}), body.get("stream", False)
    if not isinstance(name, str):
        raise InvalidRequestError("tool: required, a string")
    if not isinstance(params, dict):
        raise InvalidRequestError("params: must be an object")
    if not isinstance(stream, bool):
        raise InvalidRequestError("stream: must be a boolean")
    try:
        tool = toolbox.find(name, stream)
    except UnknownTool as exc:
        raise NotFoundError(str(exc)) from None
    where = Where(header(request.headers, "x-tool-cwd"), header(request.headers, "x-tool-runtime"),
                  header(request.headers, "x-resp-type"))
    if stream:
        return ApiReply(stream=_streamed(toolbox, tool, params, where, request))
    try:
        return ApiReply(body=toolbox.call(tool, params, where.cwd, where.runtime, where.resp_type,
                                          should_stop=request.should_stop))
    except InvalidParams as exc:
        raise InvalidRequestError(f"params: {exc}") from None
    except OutsideRoot as exc:
        raise PermissionDeniedError(str(exc)) from None
    except ToolError as exc:
        raise InvalidRequestError(str(exc)) from None


def _streamed(toolbox: Toolbox, tool: Tool, params: dict[str, Any], where: Where,
              request: ApiRequest) -> Iterator[SseEvent]:
    """``{"chunk": ...}`` events as the tool writes, then ``{"done": true}`` (with ``error`` if it failed)."""
    pieces: queue.Queue[Any] = queue.Queue(maxsize=256)
    gone = threading.Event()

    def on_chunk(text: str) -> bool:
        if text and not gone.is_set():
            pieces.put(SseEvent({"chunk": text}))
        return not gone.is_set() and not request.should_stop()

    def run() -> None:
        done: dict[str, Any] = {"done": True}
        try:
            toolbox.call(tool, params, where.cwd, where.runtime, where.resp_type, on_chunk=on_chunk,
                         should_stop=request.should_stop)
        except Exception as exc:
            done["error"] = str(exc)
        pieces.put(SseEvent(done))
        pieces.put(_DONE)

    threading.Thread(target=run, name="tool-stream", daemon=True).start()
    try:
        while (event := pieces.get()) is not _DONE:
            yield event
    finally:
        gone.set()
        while not pieces.empty():  # unblock a writer waiting for room
            pieces.get_nowait()
