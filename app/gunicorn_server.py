"""gunicorn, embedded: one gthread worker that builds the application after the fork."""

from __future__ import annotations

import signal
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from app.logs import CloudLoggingFormatter
from app.settings import Settings
from app.wiring import Application, build_application
from gcp import VertexEnvironment


class JsonLinesLogger(Logger):  # type: ignore[misc]
    """gunicorn's own log lines in the same Cloud Logging JSON as the application's."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for logger in (self.error_log, self.access_log):
            for handler in logger.handlers:
                handler.setFormatter(CloudLoggingFormatter())


class ContainerServer(BaseApplication):  # type: ignore[misc]
    def __init__(
        self, settings: Settings, model_path: str, vertex: VertexEnvironment | None, options: dict[str, Any]
    ) -> None:
        self._settings = settings
        self._model_path = model_path
        self._vertex = vertex
        self._options = options
        self._application: Application | None = None
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            if value is not None:
                self.cfg.set(key, value)
        self.cfg.set("worker_exit", self._worker_exit)
        self.cfg.set("post_worker_init", self._post_worker_init)

    def load(self) -> Any:
        self._application = build_application(self._settings, self._model_path, self._vertex)
        return self._application.flask

    def _post_worker_init(self, worker: Any) -> None:
        """On SIGTERM (Vertex scale-down, docker stop), requests that have not started yet are
        answered 503 while the running ones finish; gunicorn then stops the worker."""
        stop = signal.getsignal(signal.SIGTERM)

        def on_term(signum: int, frame: Any) -> None:
            if self._application is not None:
                self._application.drain()
            if callable(stop):
                stop(signum, frame)

        signal.signal(signal.SIGTERM, on_term)

    def _worker_exit(self, server: Any, worker: Any) -> None:
        if self._application is not None:
            self._application.shutdown()
