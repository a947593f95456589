"""The gRPC server beside the HTTP one, in the same worker process: the Llama service, grpc.health.v1
(``SERVING`` once the model is loaded, ``NOT_SERVING`` while it loads and once the server drains) and
reflection, on ``--grpc-port`` at every TCP address of ``--host``, with the HTTP side's TLS pair and
body limit."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from app.rpc.descriptors import SERVICE_NAME, register
from app.rpc.service import LlamaService

log = logging.getLogger(__name__)

GRPC_WORKERS = 64  # calls served at once (each holds a thread while it generates); more wait in line
READY_POLL_SECONDS = 0.2


class GrpcServerError(RuntimeError):
    """The gRPC port cannot be bound."""


class ReadinessHealth(health.HealthServicer):
    """grpc.health.v1 that reads readiness on each Check (a poll thread keeps Watch's answers current)."""

    def __init__(self, is_ready: Callable[[], bool]) -> None:
        super().__init__(experimental_non_blocking=True)
        self._is_ready = is_ready
        self._serving = False
        self._draining = False
        self._set(health_pb2.HealthCheckResponse.NOT_SERVING)
        self.refresh()

    def _set(self, status: Any) -> None:  # a HealthCheckResponse.ServingStatus
        for name in ("", SERVICE_NAME):
            self.set(name, status)

    def refresh(self) -> bool:
        """Set the status from readiness when it changed; True once serving."""
        serving = not self._draining and self._is_ready()
        if serving != self._serving:
            self._set(health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING)
            self._serving = serving
        return serving

    def Check(self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext
              ) -> health_pb2.HealthCheckResponse:
        if not self._serving and not self._draining:
            self.refresh()
        return super().Check(request, context)

    def drain(self) -> None:
        self._draining = True
        self.enter_graceful_shutdown()


class GrpcDoor:
    def __init__(self, service: LlamaService, hosts: Sequence[str], port: int, is_ready: Callable[[], bool],
                 max_body_bytes: int, tls: tuple[str, str] | None = None) -> None:
        """``tls``: the (key file, certificate file) pair of the HTTP side, or None for plain gRPC."""
        options = [("grpc.max_receive_message_length", max_body_bytes or -1), ("grpc.max_send_message_length", -1)]
        self._server = grpc.server(ThreadPoolExecutor(max_workers=GRPC_WORKERS, thread_name_prefix="grpc"),
                                   options=options)
        self._server.add_generic_rpc_handlers((service.generic_handler(),))
        self._health = ReadinessHealth(is_ready)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        register()
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server)
        credentials = None
        if tls is not None:
            key, cert = (Path(path).read_bytes() for path in tls)
            credentials = grpc.ssl_server_credentials([(key, cert)])
        self.addresses = [self._bind(host, port, credentials) for host in hosts if not host.endswith(".sock")]
        self._stopped = threading.Event()

    def _bind(self, host: str, port: int, credentials: grpc.ServerCredentials | None) -> str:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        bound = (self._server.add_secure_port(address, credentials) if credentials is not None
                 else self._server.add_insecure_port(address))
        if not bound:
            raise GrpcServerError(f"--grpc-port: cannot listen on {address}")
        return address

    def start(self) -> None:
        self._server.start()
        threading.Thread(target=self._serve_when_ready, name="grpc-health", daemon=True).start()
        log.info("gRPC: %s on %s (health, reflection)", SERVICE_NAME, ", ".join(self.addresses))

    def _serve_when_ready(self) -> None:
        while not self._health.refresh():
            if self._stopped.wait(READY_POLL_SECONDS):
                return

    def drain(self) -> None:
        """Health says NOT_SERVING from now on (the service's own calls get UNAVAILABLE)."""
        self._stopped.set()
        self._health.drain()

    def stop(self, grace_seconds: float = 5.0) -> None:
        self.drain()
        self._server.stop(grace_seconds).wait()
