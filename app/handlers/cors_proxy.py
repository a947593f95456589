"""GET and POST /cors-proxy: llama-server's web UI fetches MCP servers through it when started with
``--ui-mcp-proxy``; without that flag llama-server answers 403. This server has no MCP proxy (the flag
is accepted with a warning), so the route is always that 403, as llama-server's when the proxy is off."""

from __future__ import annotations

from app.handlers.context import ServerContext
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import PermissionDeniedError

OFF = "the CORS proxy is off: llama-server serves it with --ui-mcp-proxy, which this server does not implement"


def get_cors_proxy(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    """llama-server's CORS proxy, switched off (403)."""
    raise PermissionDeniedError(OFF)


def post_cors_proxy(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    """llama-server's CORS proxy, switched off (403)."""
    raise PermissionDeniedError(OFF)
