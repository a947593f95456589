"""What a Python HTTP server reaches with no application work: the ceiling under the rows of
bench/light_requests.py. Not a test, and not part of the product.

Three servers answer the four light requests (``LLAMA_SERVER_LIGHT``) with fixed bodies; a POST's
JSON body is still read and decoded:

    asyncio   one thread, an ``asyncio.Protocol`` with the least HTTP/1.1 keep-alive parsing that
              serves these clients: the interpreter alone, no framework
    gunicorn  gunicorn's gthread worker (one worker, the container's thread count) around a bare
              WSGI function: this container's server, without Flask or the application
    flask     the same gunicorn around a Flask app with the four routes: this container's stack,
              without the middleware, the handlers or the engine

    .venv/bin/python -m bench.python_ceiling asyncio --port 8099   # the asyncio server alone
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

HEALTH = {"status": "ok"}
PROPS = {"default_generation_settings": {"n_ctx": 1024, "params": {"temperature": 0.8, "top_k": 40}},
         "total_slots": 16, "model_path": "model.gguf", "chat_template": "", "build_info": "python"}
TOKENS = {"tokens": [28565, 451, 1651, 28, 2813, 42, 357, 314, 253, 2000, 582, 30]}
TEXT = {"content": "Tokenize this request, please: it is a light one."}


def answer(path: str, body: bytes) -> dict[str, Any] | None:
    """The fixed answer to one light request; None for a path it does not serve."""
    if path == "/health":
        return HEALTH
    if path == "/props":
        return PROPS
    if path in ("/tokenize", "/detokenize"):
        json.loads(body or b"{}")  # the request's JSON is read, as a real handler would
        return TOKENS if path == "/tokenize" else TEXT
    return None


def response(path: str, body: bytes) -> tuple[str, bytes]:
    """The status and the JSON payload that answer one request."""
    reply = answer(path, body)
    if reply is None:
        return "404 Not Found", json.dumps({"error": "not found"}).encode()
    return "200 OK", json.dumps(reply).encode()


def content_length(head: bytes) -> int:
    """The Content-Length of a message whose header block is ``head`` (0 without one)."""
    at = head.lower().find(b"content-length:")
    return int(head[at + 15:].split(b"\r\n")[0]) if at >= 0 else 0


def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    status, payload = response(environ["PATH_INFO"], body)
    start_response(status,
                   [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
    return [payload]


def make_flask_app() -> Any:
    from flask import Flask, request

    app = Flask(__name__)

    @app.get("/health")
    def health() -> Any:
        return HEALTH

    @app.get("/props")
    def props() -> Any:
        return PROPS

    @app.post("/tokenize")
    def tokenize() -> Any:
        request.get_json()
        return TOKENS

    @app.post("/detokenize")
    def detokenize() -> Any:
        request.get_json()
        return TEXT

    return app


def gunicorn_command(app: str, port: int, threads: int) -> list[str]:
    """gunicorn as this container runs it (one gthread worker, ``threads`` threads, keep-alive), around
    ``app``: ``wsgi_app`` or ``make_flask_app()`` (a factory, which gunicorn calls)."""
    return [sys.executable, "-m", "gunicorn", "--workers", "1", "--worker-class", "gthread", "--threads", str(threads),
            "--keep-alive", "5", "--log-level", "warning", "--bind", f"127.0.0.1:{port}", f"bench.python_ceiling:{app}"]


class LightProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive, Content-Length bodies only: enough for bench/light_requests.py's clients."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = content_length(head)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4:end + 4 + length]
            self.buffer = self.buffer[end + 4 + length:]
            status, payload = response(head.split(b" ", 2)[1].decode(), body)
            self.transport.write(b"HTTP/1.1 " + status.encode() + b"\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)


async def serve_asyncio(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(LightProtocol, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("server", choices=["asyncio"])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(serve_asyncio(args.port))


if __name__ == "__main__":
    main()
