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

log = logging.getLogger(__name__)

PREDICT_WORKERS = 128


@dataclass
class HttpSide:
    routes: tuple[Route, ...]
    flask: Flask
    draining: threading.Event


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
                                  settings.max_response_bytes, settings.predict_slots)
        except VertexEnvironmentError as exc:
            log.error("%s", exc)
            on_load_failure(exc)
            raise
    draining = threading.Event()
    site = StaticSite.from_directory(Path(settings.ui_directory)) if settings.ui_directory else None
    flask = create_app(table, is_ready, api_keys, settings.route_prefix, max_body_bytes=settings.max_body_bytes,
                       is_draining=draining.is_set, cors=CorsPolicy.from_settings(settings), site=site,
                       sessions=sessions)
    return HttpSide(table, flask, draining)
