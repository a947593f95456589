"""What an instance and a router build alike over their route table: Vertex AI's routes on Vertex AI,
then the Flask app (middleware, CORS, the web UI's files). Imported in the worker, after the fork."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.config.settings import Settings
from app.protocol.api import Route
from app.vertex.environment import VertexEnvironment, VertexEnvironmentError

if TYPE_CHECKING:
    from flask import Flask

    from app.protocol.stream_sessions import StreamSessions
    from app.rpc.server import GrpcDoor

log = logging.getLogger(__name__)

PREDICT_WORKERS = 128


@dataclass
class HttpSide:
    routes: tuple[Route, ...]
    flask: Flask
    draining: threading.Event
    grpc: GrpcDoor | None = None  # --grpc-port: the same table over gRPC

    def drain(self) -> None:
        """From now on new requests get 503 (gRPC: UNAVAILABLE, health NOT_SERVING)."""
        self.draining.set()
        if self.grpc is not None:
            self.grpc.drain()

    def close(self) -> None:
        if self.grpc is not None:
            self.grpc.stop()


def serve_table(settings: Settings, routes: Sequence[Route], vertex: VertexEnvironment | None,
                admit: Callable[[], AbstractContextManager[None]], is_ready: Callable[[], bool],
                api_keys: Sequence[str], on_load_failure: Callable[[BaseException], None],
                sessions: StreamSessions | None = None) -> HttpSide:
    """``routes`` with Vertex AI's added (an ``AIP_PREDICT_ROUTE`` that hides an API route is fatal, as a
    failed load), and the Flask app that serves them."""
    from app.http import CorsPolicy, StaticSite, create_app
    from app.vertex.predict import vertex_routes

    table = tuple(routes)
    if vertex is not None:
        pool = ThreadPoolExecutor(max_workers=PREDICT_WORKERS, thread_name_prefix="predict")
        try:
            table = vertex_routes(table, vertex, pool, settings.predict_default_route, admit,
                                  settings.max_response_bytes, settings.predict_slots, settings.predictions_format)
        except VertexEnvironmentError as exc:
            log.error("%s", exc)
            on_load_failure(exc)
            raise
    draining = threading.Event()
    door = serve_grpc(settings, table, api_keys, is_ready, draining, on_load_failure) if settings.grpc_port else None
    site = StaticSite.from_directory(Path(settings.ui_directory)) if settings.ui_directory else None
    flask = create_app(table, is_ready, api_keys, settings.route_prefix, max_body_bytes=settings.max_body_bytes,
                       is_draining=draining.is_set, cors=CorsPolicy.from_settings(settings), site=site,
                       sessions=sessions)
    return HttpSide(table, flask, draining, door)


def serve_grpc(settings: Settings, table: Sequence[Route], api_keys: Sequence[str], is_ready: Callable[[], bool],
               draining: threading.Event, on_load_failure: Callable[[BaseException], None]) -> GrpcDoor:
    """The gRPC door over the same table, started (a port that cannot be bound is fatal, as a failed load)."""
    from app.rpc.server import GrpcDoor, GrpcServerError
    from app.rpc.service import LlamaService

    tls = (settings.ssl_key_file, settings.ssl_cert_file) if settings.ssl_key_file and settings.ssl_cert_file else None
    try:
        door = GrpcDoor(LlamaService(table, api_keys, is_ready, draining.is_set), settings.listen_hosts,
                        settings.grpc_port, is_ready, settings.max_body_bytes, tls)
    except GrpcServerError as exc:
        log.error("%s", exc)
        on_load_failure(exc)
        raise
    door.start()
    return door
