"""gunicorn, embedded: one gthread worker that builds the application after the fork."""

from __future__ import annotations

from typing import Any

from gunicorn.app.base import BaseApplication

from app.settings import Settings
from app.wiring import Application, build_application
from gcp import VertexEnvironment


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

    def load(self) -> Any:
        self._application = build_application(self._settings, self._model_path, self._vertex)
        return self._application.flask

    def _worker_exit(self, server: Any, worker: Any) -> None:
        if self._application is not None:
            self._application.shutdown()
