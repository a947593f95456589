"""gunicorn, embedded: one gthread worker that builds the application after the fork, a master that
knows why that worker died (app/server/worker_crashes.py), and responses that go out whole."""

from __future__ import annotations

import faulthandler
import logging
import os
import select
import selectors
import shutil
import signal
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent import futures
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from gunicorn.app.base import BaseApplication
from gunicorn.errors import HaltServer
from gunicorn.glogging import Logger
from gunicorn.workers.gthread import ThreadWorker

from app.config.settings import Settings
from app.host.llama_build import recorded_build_args, this_cpu
from app.server.logs import CloudLoggingFormatter
from app.server.worker_crashes import CrashPolicy, Phase, WorkerPhase, read_crash_report
from app.vertex.environment import VertexEnvironment

if TYPE_CHECKING:  # the worker imports them (load): the master never loads llama.cpp or the engine
    from app.server.fault_injection import Crash
    from app.server.router_wiring import RouterApplication
    from app.server.wiring import Application

log = logging.getLogger("app")


class JsonLinesLogger(Logger):  # type: ignore[misc]
    """gunicorn's own log lines in the same Cloud Logging JSON as the application's."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for logger in (self.error_log, self.access_log):
            for handler in logger.handlers:
                handler.setFormatter(CloudLoggingFormatter())


class HeldHeaderSocket:
    """The socket one response is written through. gunicorn writes a response's header block and
    its body in separate ``sendall`` calls; the first one (always the header block) is held back and
    sent with the first body bytes. A worker that dies in between has sent nothing, so the client
    sees a closed connection, never a status line whose body never comes."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._held: bytes | None = None
        self._first = True

    def sendall(self, data: bytes) -> None:
        if self._first:
            self._first = False
            self._held = bytes(data)
            return
        if self._held is not None:
            data, self._held = self._held + bytes(data), None
        self._sock.sendall(data)

    def sendfile(self, *args: Any, **kwargs: Any) -> Any:
        self.flush()
        return self._sock.sendfile(*args, **kwargs)

    def flush(self) -> None:
        """Send a header block still held (a response with an empty body)."""
        if self._held is not None:
            held, self._held = self._held, None
            self._sock.sendall(held)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def request_target(sock: Any) -> bytes | None:
    """The path of the request waiting on ``sock``, read without consuming it (None if its request
    line has not arrived whole, or it is not a GET or HEAD). Under TLS the bytes are encrypted: None,
    so health checks share the request threads there."""
    if isinstance(sock, ssl.SSLSocket):
        return None
    try:
        head: bytes = sock.recv(512, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:  # BlockingIOError included: nothing there after all
        return None
    line, found, _ = head.partition(b"\r\n")
    parts = line.split(b" ")
    if not found or len(parts) != 3 or parts[0] not in (b"GET", b"HEAD"):
        return None
    return parts[1].partition(b"?")[0]


LINGER_SECONDS = 0.002  # how long a request thread waits for the next request on its connection
LINGER_REQUESTS = 32  # requests served in a row that way; then the connection goes back to the poller


def readable_within(sock: Any, seconds: float) -> bool:
    """Whether ``sock`` has bytes to read (or was closed) within ``seconds``."""
    poller = select.poll()
    try:
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(seconds * 1000))
    except (OSError, ValueError):  # closed meanwhile
        return False


class TimedSocket(socket.socket):
    """A client connection whose blocking mode keeps llama-server's read/write timeout (``--timeout``).
    gthread puts each connection in blocking mode before it reads a request (``setblocking(True)``, which
    clears a timeout); here blocking mode is that timeout, so a client that sends or takes nothing for
    that long loses its connection, and its thread is free again."""

    io_timeout: float | None = None

    @classmethod
    def adopt(cls, sock: socket.socket, timeout: float) -> TimedSocket:
        timed = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        timed.io_timeout = timeout
        timed.setblocking(False)  # as gthread hands a new connection over
        return timed

    def setblocking(self, flag: bool) -> None:
        if flag and self.io_timeout:
            self.settimeout(self.io_timeout)
        else:
            super().setblocking(flag)


class WholeResponseWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker, writing each response through a ``HeldHeaderSocket``. The request
    is still read from the real socket (the parser holds it), and only a request that completed
    sends what is held: after an error gunicorn closes the connection instead.

    Health checks have threads of their own: a connection whose request is a GET of one of
    ``fast_paths`` goes to a reserved pool, so that generations, long streams and slow readers
    holding every request thread cannot make Vertex AI's health check wait (its deadline is 10 s,
    and a replica that misses it loses its traffic).

    What it relies on of gthread beyond its documented hooks (``enqueue_req``, ``handle``,
    ``handle_request``, ``init_process``): the main loop's ``method_queue``, ``finish_request``,
    ``poller``, ``pending_conns`` and ``on_pending_socket_readable``, and ``TConn``'s ``sock``,
    ``initialized``, ``data_ready`` and ``timeout``; tests/unit/test_worker_crashes.py checks that the
    installed gunicorn has each of them."""

    fast_paths: frozenset[bytes] = frozenset()  # set in the worker once the app is built
    FAST_THREADS = 2
    FAST_THREAD_NAME = "health"

    def init_process(self) -> None:
        self._fast_pool = futures.ThreadPoolExecutor(self.FAST_THREADS, thread_name_prefix=self.FAST_THREAD_NAME)
        self._busy = 0  # request threads serving a connection now (the health threads aside)
        self._busy_lock = threading.Lock()
        try:
            super().init_process()
        finally:
            self._fast_pool.shutdown(wait=False)

    def enqueue_req(self, conn: Any) -> None:
        """On the main loop: a new connection gets the read timeout; one whose request has not arrived
        waits in the poller (not in a request thread: it may be a health check); a health check goes to
        the reserved threads, everything else to gthread's."""
        if not conn.initialized and not isinstance(conn.sock, TimedSocket | ssl.SSLSocket) and self.cfg.timeout:
            conn.sock = TimedSocket.adopt(conn.sock, self.cfg.timeout)
        if self.fast_paths and not conn.initialized and not conn.data_ready and not readable_within(conn.sock, 0):
            conn.timeout = time.monotonic() + self.cfg.keepalive
            self.pending_conns.append(conn)
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))
        elif self.fast_paths and request_target(conn.sock) in self.fast_paths:
            future = self._fast_pool.submit(self.handle, conn)
            future.add_done_callback(lambda done: self.method_queue.defer(self.finish_request, conn, done))
        else:
            super().enqueue_req(conn)

    def handle(self, conn: Any) -> Any:
        """A keep-alive connection whose next request comes within ``LINGER_SECONDS`` is served again
        by the same thread, up to ``LINGER_REQUESTS`` in a row and only while other request threads
        are free (so no connection waits for one). gthread would hand the connection to its poller
        and back to a request thread for each request: those two hand-offs were most of a light
        request's time (/health, /tokenize: 1.1-1.6x the requests/s with this)."""
        health = threading.current_thread().name.startswith(self.FAST_THREAD_NAME)  # not a request thread
        with self._busy_lock:
            self._busy += not health
        try:
            keep_alive = super().handle(conn)
            for _ in range(LINGER_REQUESTS - 1):
                if not (keep_alive is True and self.alive and (health or self._busy < self.cfg.threads)
                        and readable_within(conn.sock, LINGER_SECONDS)):
                    break
                keep_alive = super().handle(conn)
            return keep_alive
        finally:
            with self._busy_lock:
                self._busy -= not health

    def handle_request(self, req: Any, conn: Any) -> Any:
        raw = conn.sock
        if self.cfg.timeout:
            raw.settimeout(self.cfg.timeout)  # a TLS connection too, for its body and its response
        held = HeldHeaderSocket(raw)
        conn.sock = held
        try:
            keep_alive = super().handle_request(req, conn)
        finally:
            conn.sock = raw
        held.flush()
        from app.http import take_close_request  # imported by the worker, after the model started loading

        asked_to_close = take_close_request()
        return keep_alive and not asked_to_close


def health_paths(application: Application | RouterApplication) -> frozenset[bytes]:
    """Every served path of the health and liveness handlers (``/health``, ``/v1/health``, ``AIP_HEALTH_ROUTE``,
    ``/live``): answered by the reserved threads, however busy the others are."""
    return frozenset((application.route_prefix + route.path).encode() for route in application.routes
                     if route.name in ("get_health", "get_live"))


def set_up_llama_cpp_early(verbose: bool) -> None:
    """The worker's first step, on a thread of its own: llama.cpp's process set-up (its log bridge, and
    ggml's scan of its CPU variants: they are loaded and scored, 30 ms outside the GIL) runs while
    the worker's main thread imports the engine, instead of after it on the engine thread. Where it
    fails, the engine thread's own call (``LlamaBackend``) fails the same way and reports it: here it
    is only logged at debug level."""
    try:
        from app.engine.llama.ggml import set_up_llama_cpp

        set_up_llama_cpp(verbose)
    except Exception as exc:  # the engine thread's call reports it
        log.debug("llama.cpp's early set-up: %s (the model's load tries again)", exc)


class ContainerServer(BaseApplication):  # type: ignore[misc]
    def __init__(
        self, settings: Settings, model_path: str, vertex: VertexEnvironment | None, options: dict[str, Any],
        crash: Crash | None = None, argv: Sequence[str] = (),
    ) -> None:
        self._settings = settings
        self._argv = tuple(argv)  # the command line, which a router's children start with
        self._model_path = model_path
        self._vertex = vertex
        self._options = options
        self._crash = crash  # test-only (app/server/fault_injection.py)
        self._application: Application | RouterApplication | None = None
        # Made in the master before the fork, so that the worker and the master share them.
        self._phase = WorkerPhase()
        self._crash_dir = Path(tempfile.mkdtemp(prefix="vertex-llama-crashes-"))
        self._crash_file: IO[str] | None = None
        self._policy = CrashPolicy()
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            if value is not None:
                self.cfg.set(key, value)
        self.cfg.set("worker_class", f"{__name__}.{WholeResponseWorker.__name__}")
        self.cfg.set("pre_fork", self._pre_fork)
        self.cfg.set("post_fork", self._post_fork)
        self.cfg.set("post_worker_init", self._post_worker_init)
        self.cfg.set("worker_exit", self._worker_exit)
        self.cfg.set("child_exit", self._child_exit)
        self.cfg.set("on_exit", self._on_exit)

    def load(self) -> Any:
        if self._settings.is_router:
            from app.server.router_wiring import build_router_application
            from app.server.wiring import exit_on_load_failure

            self._application = build_router_application(self._settings, self._argv, os.environ, self._vertex,
                                                          exit_on_load_failure)
            self._phase.set(Phase.SERVING)
            return self._application.flask
        threading.Thread(target=set_up_llama_cpp_early, args=(self._settings.debug_logs,), name="llama-set-up",
                         daemon=True).start()
        from app.engine.llama import LlamaBackend
        from app.server.fault_injection import with_crash
        from app.server.wiring import build_application

        make_backend = with_crash(LlamaBackend, self._crash)
        self._application = build_application(self._settings, self._model_path, self._vertex,
                                               make_backend=make_backend,
                                               on_ready=lambda: self._phase.set(Phase.SERVING))
        return self._application.flask

    def _crash_path(self, pid: int) -> Path:
        return self._crash_dir / f"worker-{pid}.txt"

    # ---- in the master ---------------------------------------------------------------------

    def _pre_fork(self, server: Any, worker: Any) -> None:
        self._phase.set(Phase.BOOTING)

    def _child_exit(self, server: Any, worker: Any) -> None:
        """A worker is gone: log why, and stop the server where another would die the same way."""
        path = self._crash_path(worker.pid)
        report = read_crash_report(path)
        path.unlink(missing_ok=True)
        verdict = self._policy.judge(worker.pid, self._phase.get(), report, this_cpu(), recorded_build_args())
        if verdict is None:
            return
        log.error("%s", verdict.message)
        if report is not None:
            log.info("crash report of worker %s:\n%s", worker.pid, report.text)
        if verdict.stop and server.LISTENERS:  # no listeners: the master is stopping anyway
            raise HaltServer("the worker crashed (the cause is logged above)", verdict.exit_status)

    def _on_exit(self, server: Any) -> None:
        shutil.rmtree(self._crash_dir, ignore_errors=True)

    # ---- in the worker ---------------------------------------------------------------------

    def _post_fork(self, server: Any, worker: Any) -> None:
        """First thing in a new worker: a crash report for any fatal signal from here on."""
        self._crash_file = self._crash_path(worker.pid).open("w")
        faulthandler.enable(self._crash_file, all_threads=True)

    def _post_worker_init(self, worker: Any) -> None:
        """Health paths to the worker's reserved threads. On SIGTERM (Vertex scale-down, docker
        stop), requests that have not started yet are answered 503 while the running ones finish;
        gunicorn then stops the worker."""
        if self._application is not None:
            worker.fast_paths = health_paths(self._application)
        stop = signal.getsignal(signal.SIGTERM)

        def on_term(signum: int, frame: Any) -> None:
            if self._application is not None:
                self._application.drain()
            if callable(stop):
                stop(signum, frame)

        signal.signal(signal.SIGTERM, on_term)

    def _worker_exit(self, server: Any, worker: Any) -> None:
        self._phase.set(Phase.EXITING)
        if self._application is not None:
            self._application.shutdown()
