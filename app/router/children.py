"""Child instances: one process of this same server per loaded model, on a loopback port with a key of
its own. A child is started, watched until it answers /health, and watched until it exits (a crash is
recorded as ``failed`` with its ``exit_code``); it is stopped with SIGTERM after its requests finish (at
most its ``stop-timeout``), then killed."""

from __future__ import annotations

import ctypes
import http.client
import json
import logging
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from app.config.settings import OPTIONS
from app.router.arguments import RESERVED
from app.router.catalog import ModelEntry
from app.router.connections import Connections

log = logging.getLogger(__name__)

CHILD_HOST = "127.0.0.1"
HEALTH_POLL_SECONDS = 0.02
TERM_GRACE_SECONDS = 15.0  # after SIGTERM, before SIGKILL
PR_SET_PDEATHSIG = 1
# The router's own environment that a child must not see: Vertex AI's (the router answers Vertex AI), and
# every reserved option's variable (the router sets the child's host, port, key, alias and model itself).
RESERVED_ENV = frozenset(name for option in OPTIONS if option.dest in RESERVED
                         for name in (option.env, *option.env_aliases) if name)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((CHILD_HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def child_environment(environ: Mapping[str, str], key: str) -> dict[str, str]:
    env = {name: value for name, value in environ.items()
           if not name.startswith("AIP_") and name not in RESERVED_ENV}
    env["LLAMA_API_KEY"] = key
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _die_with_parent() -> Callable[[], None] | None:
    """A child's pre-exec step on Linux: SIGTERM when the router's process dies (a crash leaves no orphan).
    The signal follows the thread that started the child, so children are started on one long-lived thread."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return set_death_signal


@dataclass
class Child:
    """A running child: its process, address, key and connection pool."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    key: str
    args: list[str]
    connections: Connections
    stop_requested: bool = False

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def get_json(self, path: str, timeout: float = 5.0) -> Any:
        """A GET to the child, its JSON answer (None where it gives none)."""
        answer = get_once(self.port, path, self.headers(), timeout)
        try:
            return json.loads(answer[1]) if answer is not None and answer[0] == 200 else None
        except ValueError:
            return None


@dataclass
class Launch:
    """How children are started: the router's own flags (reserved ones removed), its environment, and the
    flags every child gets besides."""

    router_argv: Sequence[str]
    environ: Mapping[str, str]
    extra_argv: Sequence[str] = ()
    read_timeout: float | None = None
    python: str = field(default_factory=lambda: sys.executable)

    def command(self, entry: ModelEntry, port: int) -> list[str]:
        # preset options first: the router's own flags come after them and win (llama-server's precedence)
        return [self.python, "-m", "app", *entry.argv(), *self.router_argv, *self.extra_argv,
                "--host", CHILD_HOST, "--port", str(port), "--alias", entry.name, *entry.model_argv]


class Spawner:
    """Starts each child on a thread of its own, which then watches it: until it answers /health
    (``on_ready``), then until it exits (``on_exit``). That thread lives as long as its child, as
    PR_SET_PDEATHSIG needs (the signal follows the thread that started the process)."""

    def __init__(self, launch: Launch) -> None:
        self._launch = launch
        self._pre_exec = _die_with_parent()

    def start(self, entry: ModelEntry, on_ready: Callable[[Child], None], on_exit: Callable[[Child], None]) -> Child:
        started: list[Child | BaseException] = []
        handed = threading.Event()
        threading.Thread(target=self._run, args=(entry, started, handed, on_ready, on_exit),
                         name=f"child-{entry.name}", daemon=True).start()
        handed.wait()
        if isinstance(started[0], BaseException):
            raise started[0]
        return started[0]

    def _run(self, entry: ModelEntry, started: list[Child | BaseException], handed: threading.Event,
             on_ready: Callable[[Child], None], on_exit: Callable[[Child], None]) -> None:
        try:
            child = self._spawn(entry)
        except BaseException as exc:  # handed to the caller
            started.append(exc)
            handed.set()
            return
        started.append(child)
        handed.set()
        if wait_healthy(child, lambda: child.stop_requested):
            on_ready(child)
        child.process.wait()
        on_exit(child)

    def _spawn(self, entry: ModelEntry) -> Child:
        port, key = free_port(), secrets.token_urlsafe(32)
        command = self._launch.command(entry, port)
        process = subprocess.Popen(command, env=child_environment(self._launch.environ, key),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   preexec_fn=self._pre_exec)  # only prctl runs in it
        connections = Connections(CHILD_HOST, port, self._launch.read_timeout)
        threading.Thread(target=relay_output, args=(entry.name, process.stdout), name=f"log-{entry.name}",
                         daemon=True).start()
        log.info("model %s: started child %s on %s:%s: %s", entry.name, process.pid, CHILD_HOST, port,
                 " ".join(command[1:]))
        return Child(entry.name, process, port, key, command, connections)


def get_once(port: int, path: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes] | None:
    """One GET to a child on a connection of its own: (status, body), or None where it did not answer."""
    connection = http.client.HTTPConnection(CHILD_HOST, port, timeout=timeout)
    try:
        connection.request("GET", path, headers=headers)
        reply = connection.getresponse()
        return reply.status, reply.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def relay_output(name: str, stream: IO[bytes] | None) -> None:
    """A child's log lines, into the router's log under the model's name."""
    if stream is None:
        return
    child_log = logging.getLogger(f"app.router.child.{name}")
    for line in stream:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            child_log.info("%s", text)


def wait_healthy(child: Child, gone: Callable[[], bool]) -> bool:
    """True once the child answers /health with 200; False if its process ended first or it was unloaded."""
    while child.process.poll() is None and not gone():
        answer = get_once(child.port, "/health", {}, 2.0)
        if answer is not None and answer[0] == 200:
            return True
        time.sleep(HEALTH_POLL_SECONDS)
    return False


def terminate(child: Child, force: bool) -> None:
    """SIGTERM (the child drains and stops), or SIGKILL with ``force``; SIGKILL after a grace period."""
    child.stop_requested = True
    if child.process.poll() is not None:
        return
    try:
        if force:
            child.process.kill()
            return
        child.process.send_signal(signal.SIGTERM)
        try:
            child.process.wait(TERM_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            log.warning("model %s did not stop within %.0f s of SIGTERM: killing it", child.name, TERM_GRACE_SECONDS)
            child.process.kill()
    except ProcessLookupError:
        pass


def exit_status(process: subprocess.Popen[bytes]) -> int:
    """The process's exit code, as a shell reports it (128 + the signal for one killed by a signal)."""
    code = process.returncode
    return 128 - code if code is not None and code < 0 else int(code or 0)

