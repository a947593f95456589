"""bench/python_ceiling.py's servers answer what bench/light_requests.py's clients send: requests that
arrive together or in pieces, GETs and JSON POSTs, as this container's routes would (status 200)."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

from bench.light_requests import LLAMA_SERVER_LIGHT
from bench.python_ceiling import LightProtocol, answer, wsgi_app


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data


def replies(raw: bytes) -> list[tuple[bytes, Any]]:
    """(status line, JSON body) of each response in ``raw``."""
    found = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        found.append((head.split(b"\r\n")[0], json.loads(rest[:length])))
        raw = rest[length:]
    return found


def test_the_asyncio_server_answers_requests_together_and_in_pieces() -> None:
    protocol = LightProtocol()
    transport = Transport()
    protocol.connection_made(transport)
    wire = b"".join(request.wire() for request in LLAMA_SERVER_LIGHT.values())
    protocol.data_received(wire[:7])
    protocol.data_received(wire[7:-3])
    protocol.data_received(wire[-3:])
    got = replies(transport.written)
    assert [status for status, _ in got] == [b"HTTP/1.1 200 OK"] * 4
    assert [body for _, body in got] == [answer(request.path, json.dumps(request.body).encode())
                                         for request in LLAMA_SERVER_LIGHT.values()]


def test_the_wsgi_app_reads_the_body_and_knows_its_paths() -> None:
    statuses: list[str] = []
    body = json.dumps(LLAMA_SERVER_LIGHT["tokenize"].body).encode()
    environ = {"PATH_INFO": "/tokenize", "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}
    payload = b"".join(wsgi_app(environ, lambda status, headers: statuses.append(status)))
    assert statuses == ["200 OK"] and "tokens" in json.loads(payload)
    missing = {"PATH_INFO": "/nowhere", "wsgi.input": io.BytesIO()}
    assert b"not found" in b"".join(wsgi_app(missing, lambda status, headers: statuses.append(status)))
    assert statuses[-1] == "404 Not Found"
