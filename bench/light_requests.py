"""Light requests (no decoding: /health, /props, /tokenize, /detokenize): requests/s of this container
against llama-server (bench/llama_server.py), one server at a time.

    .venv/bin/python bench/light_requests.py [--clients 1,4] [--requests 2000]

Each client is a process of its own that sends one request after another over one keep-alive
connection with raw sockets (a client built on ``requests`` spends more CPU per request than
either server and measures itself). The row is requests/s of all clients together. llama-server is
C++ (cpp-httplib, a thread per connection); this server answers in Python (gunicorn's gthread
worker, Flask), so its ceiling is what the interpreter does per request: three more servers measure
that ceiling (bench/python_ceiling.py: Flask on the same gunicorn, the bare gunicorn, and a one-thread
asyncio server, each answering with fixed bodies and no application). Not a test.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.python_ceiling import content_length, gunicorn_command  # noqa: E402


@dataclass(frozen=True)
class LightRequest:
    """GET ``path``, or POST ``body`` (JSON) to it."""

    path: str
    body: dict[str, Any] | None = None

    def wire(self) -> bytes:
        if self.body is None:
            return f"GET {self.path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
        payload = json.dumps(self.body).encode()
        return (f"POST {self.path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload


TEXT = "Tokenize this request, please: it is a light one."
TOKENS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
LLAMA_SERVER_LIGHT = {
    "health": LightRequest("/health"),
    "props": LightRequest("/props"),
    "tokenize": LightRequest("/tokenize", {"content": TEXT}),
    "detokenize": LightRequest("/detokenize", {"tokens": TOKENS}),
}


class Connection:
    """One keep-alive connection; reconnects when the server closes it (cpp-httplib does after 100)."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._sock = self._connect()
        self._buffer = b""

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self._port), timeout=60)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def exchange(self, request: bytes) -> None:
        """Send ``request``, read its whole answer; raises unless it is a 200."""
        self._sock.sendall(request)
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end >= 0:
                length = content_length(self._buffer[:end])
                if len(self._buffer) >= end + 4 + length:
                    if not self._buffer.startswith(b"HTTP/1.1 200"):
                        raise RuntimeError(self._buffer[:200].decode(errors="replace"))
                    self._buffer = self._buffer[end + 4 + length:]
                    return
            chunk = self._sock.recv(65536)
            if not chunk:  # closed between requests: once more on a new connection
                self._sock.close()
                self._sock, self._buffer = self._connect(), b""
                self._sock.sendall(request)
                continue
            self._buffer += chunk


def _client(port: int, request: bytes, count: int, start: Any) -> None:
    connection = Connection(port)
    connection.exchange(request)  # connected and warm before the clock starts
    start.wait()
    for _ in range(count):
        connection.exchange(request)


def light_rps(port: int, request: LightRequest, clients: int = 4, requests_each: int = 1000) -> float:
    """Requests/s of ``clients`` processes, each sending ``requests_each`` requests back to back."""
    start = multiprocessing.Event()
    processes = [multiprocessing.Process(target=_client, args=(port, request.wire(), requests_each, start))
                 for _ in range(clients)]
    for process in processes:
        process.start()
    time.sleep(0.5)  # every client connected
    started = time.perf_counter()
    start.set()
    for process in processes:
        process.join()
    if any(process.exitcode for process in processes):
        raise RuntimeError(f"a client failed on {request.path}")
    return clients * requests_each / (time.perf_counter() - started)


def main() -> None:
    from app.config.settings import parse_settings
    from bench.report import free_port, peer_command, running

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default="1,4", help="client counts, comma-separated")
    parser.add_argument("--requests", type=int, default=2000, help="requests of each client")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    model = str(embedded_model_path())
    clients = tuple(int(n) for n in args.clients.split(","))
    flags = ["-np", "16", "-c", "16384", "-t", str(args.threads)]
    http_threads = parse_settings(flags, {}).http_threads

    def ours(port: int) -> tuple[list[str], Path]:
        return [sys.executable, "-m", "app", "-m", model, "--port", str(port), *flags], ROOT

    def llama_server(port: int) -> tuple[list[str], Path]:
        return peer_command("llama-server", model, port, args.threads, context="16384", slots="16")

    servers: dict[str, Callable[[int], tuple[list[str], Path]]] = {
        "ours": ours,
        "llama-server": llama_server,
        # the Python ceiling (bench/python_ceiling.py): fixed answers, no application
        "flask": lambda port: (gunicorn_command("make_flask_app()", port, http_threads), ROOT),
        "gunicorn": lambda port: (gunicorn_command("wsgi_app", port, http_threads), ROOT),
        "asyncio": lambda port: ([sys.executable, "-m", "bench.python_ceiling", "asyncio", "--port", str(port)], ROOT),
    }
    results: dict[str, dict[tuple[str, int], float]] = {}
    for label, command_for in servers.items():  # one server at a time
        port = free_port()
        command, cwd = command_for(port)
        with running(command, port, "/health", {}, cwd=cwd):
            results[label] = {(name, n): light_rps(port, request, n, args.requests)
                              for name, request in LLAMA_SERVER_LIGHT.items() for n in clients}
    print(f"light requests, requests/s ({args.requests} a client, raw keep-alive clients, one process each)")
    print("(flask, gunicorn, asyncio: Python servers with fixed answers and no application, bench/python_ceiling.py)")
    print("| request | clients | ours | flask | gunicorn | asyncio | llama-server | ours/llama-server "
          "| gunicorn/llama-server | asyncio/llama-server |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in LLAMA_SERVER_LIGHT:
        for n in clients:
            row = {label: results[label][(name, n)] for label in servers}
            peer = row["llama-server"]
            print(f"| {name} | {n} | {row['ours']:.0f} | {row['flask']:.0f} | {row['gunicorn']:.0f} "
                  f"| {row['asyncio']:.0f} | {peer:.0f} | {row['ours'] / peer:.2f} | {row['gunicorn'] / peer:.2f} "
                  f"| {row['asyncio'] / peer:.2f} |")


if __name__ == "__main__":
    main()
