"""Keep-alive connections from the router to one child (http.client, kept idle for less than the child's
keep-alive), and the watch that cuts a connection whose client went away, so the child cancels its work."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

MAX_IDLE = 64
IDLE_SECONDS = 3.0  # the child (gunicorn, keepalive 5 s) closes an idle connection after 5 s
WATCH_SECONDS = 0.1


class Connections:
    """Connections to one child: taken for a request, given back once its answer was read whole."""

    def __init__(self, host: str, port: int, read_timeout: float | None) -> None:
        self.host, self.port = host, port
        self._timeout = read_timeout
        self._idle: list[tuple[float, http.client.HTTPConnection]] = []
        self._lock = threading.Lock()

    def take(self) -> tuple[http.client.HTTPConnection, bool]:
        """A connection, and whether it was used before (a reused one may have been closed by the child)."""
        now = time.monotonic()
        with self._lock:
            while self._idle:
                since, connection = self._idle.pop()
                if now - since < IDLE_SECONDS:
                    return connection, True
                connection.close()
        return http.client.HTTPConnection(self.host, self.port, timeout=self._timeout), False

    def give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append((time.monotonic(), connection))
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for _, connection in idle:
            connection.close()

    def request(self, method: str, target: str, body: bytes | None,
                headers: dict[str, str]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send a request and read its status and headers; a reused connection that the child had
        closed is replaced once (the child read nothing of it)."""
        connection, reused = self.take()
        try:
            connection.request(method, target, body=body, headers=headers)
            return connection, connection.getresponse()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            connection.close()
            if not reused:
                raise
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self._timeout)
        connection.request(method, target, body=body, headers=headers)
        return connection, connection.getresponse()


class CancelWatch:
    """One thread that looks at every forwarded request's ``should_stop`` and, once it says the client is
    gone, shuts the request's connection to the child: the child sees its client go and cancels."""

    def __init__(self) -> None:
        self._watched: dict[int, tuple[Callable[[], bool], http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, should_stop: Callable[[], bool], connection: http.client.HTTPConnection) -> int:
        with self._lock:
            key = id(connection)
            self._watched[key] = (should_stop, connection)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="router-cancel-watch", daemon=True)
                self._thread.start()
            return key

    def unwatch(self, key: int) -> None:
        with self._lock:
            self._watched.pop(key, None)

    def _run(self) -> None:
        while True:
            time.sleep(WATCH_SECONDS)
            with self._lock:
                watched = list(self._watched.items())
            for key, (should_stop, connection) in watched:
                if _stopped(should_stop):
                    self.unwatch(key)
                    cut(connection)


def _stopped(should_stop: Callable[[], bool]) -> bool:
    try:
        return bool(should_stop())
    except Exception:  # a probe on a socket already closed: gone
        return True


def cut(connection: Any) -> None:
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    connection.close()
