"""What app/server/gunicorn_server.py's worker relies on of gunicorn's gthread worker beyond its
documented hooks, checked against the installed gunicorn: a release that renames or reshapes one of
these fails here, not in a user's health check."""

from __future__ import annotations

import inspect
import socket
from types import SimpleNamespace

from gunicorn.config import Config
from gunicorn.http.wsgi import Response
from gunicorn.workers import gthread

from app.server.gunicorn_server import TimedSocket, WholeResponseWorker


def test_the_gthread_methods_the_worker_overrides_or_calls_keep_their_shape() -> None:
    worker = gthread.ThreadWorker
    for name, parameters in (("enqueue_req", ["self", "conn"]), ("handle", ["self", "conn"]),
                             ("handle_request", ["self", "req", "conn"]), ("init_process", ["self"]),
                             ("finish_request", ["self", "conn", "fs"]),
                             ("on_pending_socket_readable", ["self", "conn", "client"])):
        assert list(inspect.signature(getattr(worker, name)).parameters) == parameters, name
    assert issubclass(WholeResponseWorker, worker)
    source = inspect.getsource(worker)
    for attribute in ("self.method_queue = ", "self.pending_conns = ", "self.poller = "):
        assert attribute in source, attribute  # the main loop's state the worker uses
    assert callable(gthread.PollableMethodQueue.defer)


def test_a_new_connection_is_what_the_worker_expects() -> None:
    left, right = socket.socketpair()
    with left, right:
        conn = gthread.TConn(Config(), left, ("127.0.0.1", 1), ("127.0.0.1", 2))
        assert conn.sock is left and conn.initialized is False and conn.data_ready is False
        assert conn.timeout is None and left.gettimeout() == 0.0  # non-blocking until a thread takes it
        conn.sock = TimedSocket.adopt(conn.sock, 7.0)
        conn.init()  # gthread sets blocking mode here; the adopted socket keeps its read timeout
        assert conn.initialized and conn.sock.gettimeout() == 7.0


def test_a_response_writes_its_header_block_apart_from_its_body() -> None:
    """HeldHeaderSocket holds the first sendall back until the body's: it must be the header block alone."""
    calls: list[bytes] = []
    sock = SimpleNamespace(sendall=lambda data: calls.append(bytes(data)))
    request = SimpleNamespace(version=(1, 1), method="GET", headers=[], should_close=lambda: False,
                              proxy_protocol_info=None, path="/")
    response = Response(request, sock, Config())
    response.start_response("200 OK", [("Content-Length", "5")])
    response.write(b"hello")
    response.close()
    assert len(calls) == 2 and calls[0].startswith(b"HTTP/1.1 200 OK\r\n") and calls[0].endswith(b"\r\n\r\n")
    assert calls[1] == b"hello"
