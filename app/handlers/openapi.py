"""GET /openapi.json: the server's OpenAPI 3.1 document."""

from __future__ import annotations

from app.handlers.context import ServerContext
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.openapi import openapi_document


def get_openapi(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    """The OpenAPI document of every route of this server."""
    return ApiReply(body=openapi_document(ctx.routes, ctx.settings.route_prefix))
