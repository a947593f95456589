"""How the server listens, as llama-server: several --host addresses (a UNIX socket among them),
HTTPS with --ssl-key-file/--ssl-cert-file, --reuse-port, and -to/--timeout closing a connection
that sends nothing. One server at a time."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import Server, free_port, launch

BASE_ARGS = ["-np", "1", "-c", "512"]


def wait_for(check: Callable[[], bool], server: Server, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.process.poll() is None, server.log()
        try:
            if check():
                return
        except (OSError, requests.RequestException):
            pass
        time.sleep(0.3)
    raise AssertionError(f"not ready in {seconds} s:\n{server.log()}")


def unix_request(path: Path, method: str, target: str, body: dict[str, object] | None = None) -> tuple[int, bytes]:
    """One HTTP/1.1 request over a UNIX socket: (status, body)."""
    payload = json.dumps(body).encode() if body is not None else b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(120)
        client.connect(str(path))
        client.sendall(f"{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                       f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    head, _, content = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), content


def test_several_hosts_with_a_unix_socket(server_dir: Path, tmp_path: Path) -> None:
    sock = tmp_path / "llama.sock"
    server = launch(server_dir, [*BASE_ARGS, "--host", f"127.0.0.1, {sock}"])
    try:
        wait_for(lambda: unix_request(sock, "GET", "/health")[0] == 200, server)
        assert requests.get(server.url("/health"), timeout=10).status_code == 200
        status, content = unix_request(sock, "POST", "/completion", {"prompt": "Hello", "n_predict": 4,
                                                                     "ignore_eos": True})
        assert status == 200 and json.loads(content)["tokens_predicted"] == 4
        assert f"unix://{sock}" in server.log()
    finally:
        assert server.stop() == 0, server.log()
    assert not sock.exists()  # removed at shutdown


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return key, cert


def test_https_with_a_key_and_a_certificate(server_dir: Path, certificate: tuple[Path, Path]) -> None:
    key, cert = certificate
    server = launch(server_dir, [*BASE_ARGS, "--ssl-key-file", str(key), "--ssl-cert-file", str(cert)])
    secure = f"https://127.0.0.1:{server.port}"
    try:
        wait_for(lambda: requests.get(secure + "/health", verify=str(cert), timeout=5).status_code == 200, server)
        reply = requests.post(secure + "/v1/chat/completions", verify=str(cert), timeout=120, json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["role"] == "assistant"
        with pytest.raises(requests.ConnectionError):  # no plain HTTP on a TLS port
            requests.get(server.url("/health"), timeout=10)
        with pytest.raises(requests.exceptions.SSLError):  # a client that does not trust the certificate
            requests.get(secure + "/health", timeout=10)
    finally:
        assert server.stop() == 0, server.log()


def test_one_tls_file_alone_is_refused(server_dir: Path, certificate: tuple[Path, Path]) -> None:
    stopped = launch(server_dir, ["--ssl-key-file", str(certificate[0])])
    assert stopped.process.wait(60) == 2
    assert "give both to serve HTTPS" in stopped.log()


def bind_beside(port: int) -> None:
    """Bind a second socket to ``port`` with SO_REUSEPORT (an OSError where the server's has not)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", port))


@pytest.mark.parametrize("reuse", [False, True])
def test_reuse_port_lets_another_socket_bind_the_port(server_dir: Path, reuse: bool) -> None:
    server = launch(server_dir, [*BASE_ARGS, *(["--reuse-port"] if reuse else [])], port=free_port())
    try:
        wait_for(lambda: requests.get(server.url("/health"), timeout=5).status_code == 200, server)
        if reuse:
            bind_beside(server.port)
        else:
            with pytest.raises(OSError):
                bind_beside(server.port)
    finally:
        assert server.stop() == 0, server.log()


def test_a_connection_that_sends_nothing_is_closed_after_the_timeout(server_dir: Path) -> None:
    server = launch(server_dir, [*BASE_ARGS, "-to", "2"])
    try:
        wait_for(lambda: requests.get(server.url("/health"), timeout=5).status_code == 200, server)
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as client:
            client.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
            answer = client.recv(4096)  # after 2 s, not when the client gives up (60 s)
            assert answer.startswith(b"HTTP/1.1 408") and b"--timeout" in answer
            assert client.recv(1024) == b""  # and the connection is closed
        for half in (b"GET /health HTTP/1.1\r\nHost:", b"GET /props HTTP/1.1\r\nHost:"):  # headers never end
            with socket.create_connection(("127.0.0.1", server.port), timeout=60) as client:
                client.sendall(half)
                with contextlib.suppress(ConnectionResetError):  # a reset is a close too
                    assert client.recv(4096) == b""  # closed after 2 s, by a health thread or a request thread
        # a connection that sends nothing at all is closed by the worker (after its keep-alive time), not kept
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as idle, contextlib.suppress(
                ConnectionResetError):
            assert idle.recv(1024) == b""
        assert requests.get(server.url("/health"), timeout=10).status_code == 200  # and it still serves
    finally:
        assert server.stop() == 0, server.log()


def keep_alive_requests(port: int, target: bytes, stop: threading.Event, served: list[int]) -> None:
    """GET ``target`` over one keep-alive connection, back to back, until ``stop``; counts answers."""
    request = b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        reader = client.makefile("rb")
        while not stop.is_set():
            client.sendall(request)
            assert reader.readline().startswith(b"HTTP/1.1 200")
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
            served[0] += 1


def test_keep_alive_connections_that_never_pause_do_not_starve_a_newcomer(server_dir: Path) -> None:
    """A request thread serves the next request of its keep-alive connection itself when it comes at
    once (app/server/gunicorn_server.py): never while that would leave no thread for anyone else. Here more
    connections than request threads (-np 1: 5) send requests back to back; each of them and a new
    connection still get answers."""
    server = launch(server_dir, [*BASE_ARGS, "--threads-http", "1"])
    stop = threading.Event()
    counts = [[0] for _ in range(8)]
    hammers = [threading.Thread(target=keep_alive_requests, args=(server.port, b"/props", stop, count), daemon=True)
               for count in counts]
    try:
        wait_for(lambda: requests.get(server.url("/health"), timeout=5).status_code == 200, server)
        for hammer in hammers:
            hammer.start()
        wait_for(lambda: all(count[0] > 0 for count in counts), server)  # every connection is being served
        assert requests.get(server.url("/v1/models"), timeout=10).status_code == 200  # the newcomer
        before = [count[0] for count in counts]
        # and each connection is served again afterwards: none was starved
        wait_for(lambda: all(count[0] > then for count, then in zip(counts, before, strict=True)), server)
    finally:
        stop.set()
        for hammer in hammers:
            hammer.join(30)
        assert server.stop() == 0, server.log()
