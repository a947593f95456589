"""GET and POST /cors-proxy?url=...: with --ui-mcp-proxy (or -ag) the web UI reaches remote MCP servers through
the server, as llama-server's: the request goes to ``url`` (http or https, no credentials in it) with the
headers the browser sent as ``x-llama-server-proxy-header-NAME``, and the answer comes back as it streams
(an MCP server's event stream included). Off, both answer 403 ``feature_disabled``, as llama-server.

One refusal of this server's own: link-local addresses (a cloud's metadata server, 169.254.169.254, which
holds the machine's credentials) are never a target."""

from __future__ import annotations

import ipaddress
import logging
import socket
import urllib.parse
from collections.abc import Iterator

import urllib3

from app.handlers.context import ServerContext
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import FeatureDisabledError, InvalidRequestError, ServerError

log = logging.getLogger(__name__)

HEADER_PREFIX = "x-llama-server-proxy-header-"
TIMEOUT = urllib3.Timeout(connect=30.0, read=600.0)  # llama-server's ten minutes
# Not passed back: hop-by-hop, what the relay changes, and CORS (this server's own middleware answers that).
_DROPPED = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding",
                      "upgrade", "proxy-authenticate", "trailer", "te", "content-type"})  # (the reply sets its type)
_POOL = urllib3.PoolManager(num_pools=16, maxsize=8)


def target_url(url: str) -> str:
    """``url`` checked as llama-server checks it (a host, no password, http or https), and not link-local."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidRequestError(f"invalid target URL: {exc}") from None
    if not parts.hostname:
        raise InvalidRequestError("invalid target URL: missing host")
    if parts.password:
        raise InvalidRequestError("authentication in target URL is not supported")
    if parts.scheme not in ("http", "https"):
        raise InvalidRequestError(f"unsupported URL scheme in target URL: {parts.scheme}")
    try:
        found = socket.getaddrinfo(parts.hostname, port or (443 if parts.scheme == "https" else 80),
                                   type=socket.SOCK_STREAM)
    except OSError as exc:
        raise InvalidRequestError(f"cannot resolve {parts.hostname}: {exc}") from None
    if any(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_link_local for info in found):
        raise InvalidRequestError("the CORS proxy does not reach link-local addresses")
    return url


def _relay(response: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    try:
        yield from response.stream(8192, decode_content=True)
    finally:
        response.release_conn()


def _forward(ctx: ServerContext, request: ApiRequest, method: str) -> ApiReply:
    if not ctx.agent.cors_proxy:
        raise FeatureDisabledError()
    url = target_url(request.params.get("url", ""))
    headers = {key[len(HEADER_PREFIX):]: value for key, value in request.headers.items()
               if key.lower().startswith(HEADER_PREFIX) and len(key) > len(HEADER_PREFIX)}
    log.info("proxying %s request to %s", method, urllib.parse.urlsplit(url)._replace(query="").geturl())
    try:
        response = _POOL.request(method, url, body=request.body if method == "POST" else None, headers=headers,
                                 preload_content=False, timeout=TIMEOUT, redirect=False, retries=False)
    except urllib3.exceptions.HTTPError as exc:
        raise ServerError(f"the proxied request failed: {exc}") from None
    passed = {key: value for key, value in response.headers.items()
              if key.lower() not in _DROPPED and not key.lower().startswith("access-control-")}
    return ApiReply(status=response.status, raw_stream=_relay(response), headers=passed,
                    content_type=response.headers.get("Content-Type", "application/octet-stream"))


def get_cors_proxy(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    """the web UI's proxy to a remote MCP server (--ui-mcp-proxy), GET"""
    return _forward(ctx, request, "GET")


def post_cors_proxy(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    """the web UI's proxy to a remote MCP server (--ui-mcp-proxy), POST"""
    return _forward(ctx, request, "POST")
