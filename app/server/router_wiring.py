"""Builds the router in the worker process (``--models-dir`` / ``--models-preset``): its models, the
children's command line, the route table refilled with proxies, Vertex AI's routes over it, the Flask app.
No model is loaded here, and the engine is never started."""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.config.settings import Settings
from app.protocol.api import Route
from app.router.arguments import without_reserved
from app.router.catalog import CatalogError, ModelEntry, load_catalog
from app.router.children import Launch, Spawner
from app.router.models import RouterModels
from app.router.routes import Router, router_routes
from app.server.http_side import HttpSide, serve_table
from app.vertex.environment import VertexEnvironment

if TYPE_CHECKING:
    from flask import Flask

    from app.handlers.context import AgentContext

log = logging.getLogger(__name__)

@dataclass
class RouterApplication:
    flask: Flask
    routes: tuple[Route, ...]
    route_prefix: str
    models: RouterModels
    side: HttpSide
    agent: AgentContext

    def drain(self) -> None:
        self.side.drain()

    def shutdown(self) -> None:
        """Every child drains and stops (SIGTERM; SIGKILL after its stop-timeout)."""
        self.side.close()
        self.models.stop_all()
        if self.agent.toolbox is not None:
            self.agent.toolbox.close()


def startup_models(catalog: Mapping[str, ModelEntry], models_max: int, on_vertex: bool) -> list[str]:
    """The models loaded at start: those marked ``load-on-startup``. On Vertex AI, where a replica gets
    traffic only once it is healthy, a router with none marked loads the first ``--models-max`` models
    by name (all of them with 0), so that it becomes healthy with models to serve."""
    marked = [name for name, entry in catalog.items() if entry.load_on_startup]
    if marked or not on_vertex:
        return marked[:models_max] if models_max > 0 else marked
    names = sorted(catalog)
    return names[:models_max] if models_max > 0 else names


def _build_info() -> str:
    try:
        return f"vertex-llama {importlib.metadata.version('vertex-llama')}"
    except importlib.metadata.PackageNotFoundError:
        return "vertex-llama"


def build_router_application(settings: Settings, argv: Sequence[str], environ: Mapping[str, str],
                             vertex: VertexEnvironment | None,
                             on_load_failure: Callable[[BaseException], None]) -> RouterApplication:
    from app.handlers.context import agent_props
    from app.handlers.routes import route_template
    from app.server.agent_wiring import build_agent

    def scan() -> dict[str, ModelEntry]:
        return load_catalog(settings.models_dir, settings.models_preset)

    try:
        catalog = scan()
    except CatalogError as exc:
        log.error("%s", exc)
        on_load_failure(exc)
        raise
    log.info("router: %d model(s): %s", len(catalog), ", ".join(catalog) or "none")
    launch = Launch(without_reserved(argv), environ, ("--metrics",) if settings.metrics else (),
                    read_timeout=float(settings.timeout) if settings.timeout else None)
    models = RouterModels(catalog, Spawner(launch), settings.models_max)
    agent = build_agent(settings, vertex is not None)  # the router runs the tools; its children do not
    router = Router(models, settings.models_max, settings.models_autoload, vertex is not None, scan, _build_info(),
                    settings.route_prefix, agent_props(agent))
    side = serve_table(settings, router_routes(route_template(agent=agent), router), vertex, nullcontext, lambda: True,
                       settings.all_api_keys(), on_load_failure)
    router.routes = side.routes
    for name in startup_models(catalog, settings.models_max, vertex is not None):
        models.load(name)
    return RouterApplication(side.flask, side.routes, settings.route_prefix, models, side, agent)
