"""Builds the running application in the worker process: engine, context, routes, Flask app.

The engine starts first, so the model loads (in llama.cpp, without the GIL) while the handlers,
pydantic schemas and Flask are imported and the routes are bound; the master process imports none of
them. The engine reports ready only once the HTTP side exists (``ready`` waits for it).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.config.engine_config import engine_options, llama_config
from app.config.settings import Settings
from app.engine import Backend, Engine
from app.engine.llama import LlamaBackend, LlamaConfig
from app.host.cpu_placement import place_compute_threads
from app.host.memory import available_memory_bytes
from app.model_sources.docker import DOCKER_SCHEME, fetch_docker_model, is_docker_source
from app.model_sources.gcs import default_cache_dir, fetch_model, find_projector, is_gcs_uri
from app.model_sources.hub import HUB_SCHEME, fetch_hub_model, is_hub_source
from app.model_sources.urls import fetch_url, is_url_source
from app.server.http_side import HttpSide, serve_table
from app.vertex.environment import VertexEnvironment

if TYPE_CHECKING:  # the HTTP side is imported by build_application, while the model loads
    from flask import Flask

    from app.handlers.context import ServerContext
    from app.protocol.api import Route

log = logging.getLogger(__name__)

LOGITS_MODULE = "app.engine.llama.logits"  # numpy's one user (imported after the load: ready)
STARTUP_SWITCH_SECONDS = 0.0005  # the GIL's switch interval while the model loads beside the imports


@dataclass
class Application:
    flask: Flask
    context: ServerContext
    side: HttpSide

    @property
    def routes(self) -> tuple[Route, ...]:
        return self.context.routes

    @property
    def route_prefix(self) -> str:
        return self.context.settings.route_prefix

    def drain(self) -> None:
        """From now on new requests get 503: the server is shutting down."""
        self.side.drain()

    def shutdown(self) -> None:
        self.side.close()
        self.context.engine.stop()
        if self.context.agent.toolbox is not None:
            self.context.agent.toolbox.close()


def exit_on_load_failure(exc: BaseException) -> None:
    """A model that cannot load is fatal: exit the worker with gunicorn's "app failed to load"
    status (4), which stops the whole server with that status."""
    log.error("stopping: the model could not be loaded (%s)", exc)
    logging.shutdown()
    os._exit(4)


@dataclass(frozen=True)
class ModelFiles:
    """The local files a start loads: the model, its projector and the draft model, where given."""

    model: str
    projector: str | None
    draft: str | None


def fetch_model_files(settings: Settings, model_path: str) -> ModelFiles:
    """The model (a path, ``gs://``, a URL, a Hugging Face repository or a registry's image), its projector
    (given, found beside a ``gs://`` model, or in the repository) and the draft model, fetched into the cache
    where remote."""
    cache = Path(settings.model_cache_dir) if settings.model_cache_dir else None
    projector = settings.mmproj
    if is_hub_source(model_path):
        fetched = fetch_hub_model(model_path.removeprefix(HUB_SCHEME), settings.hf_file, settings.hf_token,
                                  cache or default_cache_dir(), projector is None and settings.mmproj_auto,
                                  settings.offline)
        local, projector = str(fetched.model), projector or (str(fetched.mmproj) if fetched.mmproj else None)
    elif is_docker_source(model_path):
        local = str(fetch_docker_model(model_path.removeprefix(DOCKER_SCHEME), settings.docker_registry,
                                       cache or default_cache_dir(), settings.offline))
    elif is_url_source(model_path):
        local = str(fetch_url(model_path, cache or default_cache_dir()))
    else:
        local = str(fetch_model(model_path, cache)) if is_gcs_uri(model_path) else model_path
    if projector is None and settings.mmproj_url:
        projector = str(fetch_url(settings.mmproj_url, cache or default_cache_dir()))
    if projector is None and settings.mmproj_auto and is_gcs_uri(model_path):
        projector = find_projector(model_path)
    if projector is not None and is_gcs_uri(projector):
        projector = str(fetch_model(projector, cache))
    draft = settings.spec_draft_model
    if draft is not None and is_gcs_uri(draft):
        draft = str(fetch_model(draft, cache))
    elif draft is None and settings.spec_draft_hf is not None:
        draft = str(fetch_hub_model(settings.spec_draft_hf, None, settings.hf_token, cache or default_cache_dir(),
                                    False, settings.offline).model)
    return ModelFiles(local, projector, draft)


def build_http_side(settings: Settings, engine: Engine, vertex: VertexEnvironment | None,
                    on_load_failure: Callable[[BaseException], None]) -> Application:
    """The handlers' context, the route table (with Vertex AI's routes on Vertex AI) and the Flask app;
    imported here, while the model loads."""
    from app.handlers.context import ServerContext
    from app.handlers.routes import bind_routes
    from app.server.agent_wiring import build_agent

    context = ServerContext(settings, engine, api_keys=settings.all_api_keys(),
                            agent=build_agent(settings, vertex is not None))
    side = serve_table(settings, bind_routes(context), vertex, engine.admitted_as_one, lambda: engine.is_ready,
                       context.api_keys, on_load_failure, context.stream_sessions)
    context.routes = side.routes
    return Application(side.flask, context, side)


def build_application(
    settings: Settings,
    model_path: str,
    vertex: VertexEnvironment | None,
    on_load_failure: Callable[[BaseException], None] = exit_on_load_failure,
    make_backend: Callable[[LlamaConfig], Backend] = LlamaBackend,
    on_ready: Callable[[], None] | None = None,
) -> Application:
    """``make_backend`` is the backend seam: tests wrap the real backend to inject faults.
    ``on_ready`` runs on the engine thread once the model is loaded and the app can serve it."""
    def load_backend() -> Backend:
        """Runs on the engine thread while the server already answers 503: place its threads, fetch, load."""
        place_compute_threads(settings.compute_cpus)
        files = fetch_model_files(settings, model_path)
        return make_backend(llama_config(settings, files.model, files.projector, prompt_cache, files.draft))

    built: list[Application] = []  # once the HTTP side is built
    http_built = threading.Event()

    def ready() -> None:
        http_built.wait()
        built[0].context.publish_loaded_model()
        if on_ready is not None:
            on_ready()
        # numpy, for the first request that asks for probabilities: imported once the server can answer,
        # on a thread of its own, so that neither the load nor the HTTP side waits for its 60 ms
        threading.Thread(target=importlib.import_module, args=(LOGITS_MODULE,), name="import-numpy",
                         daemon=True).start()

    prompt_cache = settings.prompt_cache_bytes(available_memory_bytes())
    log.info("prompt cache: %s", "off" if prompt_cache == 0 else "no limit" if prompt_cache is None
             else f"up to {prompt_cache >> 20} MiB of host RAM")
    engine = Engine(load_backend, engine_options(settings, prompt_cache), on_ready=ready,
                    on_load_failure=on_load_failure)
    engine.start()  # the model loads while the rest is imported and built
    switch = sys.getswitchinterval()
    # The loading thread gives up the GIL at each llama.cpp call; with Python's 5 ms switch interval it
    # would wait that long behind the imports to get it back after each one (measured: 0.1 s of start-up).
    sys.setswitchinterval(STARTUP_SWITCH_SECONDS)
    application = build_http_side(settings, engine, vertex, on_load_failure)
    sys.setswitchinterval(switch)
    built.append(application)
    http_built.set()
    return application
