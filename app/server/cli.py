"""``python -m app``: parse llama-server's flags, check the model, and run gunicorn.

gunicorn runs ONE worker process (the model lives there once) with gthread threads; the app is
loaded in the worker, never preloaded, because llama.cpp state does not survive ``fork``. The
port is bound at once and the model loads on the engine thread in the background.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from app.config.settings import OPTIONS, Settings, SettingsError, parse_settings
from app.host.cpu_placement import describe, prepare_process
from app.model_sources.docker import docker_source
from app.model_sources.files import ModelFileError, local_projector, resolve_model_path
from app.model_sources.gcs import default_cache_dir, is_gcs_uri
from app.model_sources.hub import cached_models, hub_source
from app.server.fault_injection import CRASH_VARIABLE, Crash, CrashSpecError, parse_crash
from app.server.logs import LogOptions, configure_logging
from app.vertex.environment import VertexEnvironment, VertexEnvironmentError, read_vertex_environment

log = logging.getLogger("app")

GRACEFUL_SHUTDOWN_SECONDS = 30


def listen_port(settings: Settings, vertex: VertexEnvironment | None) -> int:
    if vertex is None:
        return settings.port
    if vertex.port != settings.port:
        log.warning("AIP_HTTP_PORT=%s overrides --port %s", vertex.port, settings.port)
    return vertex.port


def bind_address(host: str, port: int) -> str:
    """gunicorn's form of one --host address: a UNIX socket path (ending in .sock), IPv6 or IPv4."""
    if host.endswith(".sock"):
        return f"unix:{host}"
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


def gunicorn_options(settings: Settings, port: int, json_lines: bool = False) -> dict[str, Any]:
    return {
        "logger_class": "app.server.gunicorn_server.JsonLinesLogger" if json_lines else None,
        "bind": [bind_address(host, port) for host in settings.listen_hosts],
        "reuse_port": settings.reuse_port,
        "keyfile": settings.ssl_key_file,
        "certfile": settings.ssl_cert_file,
        "workers": 1,
        "threads": settings.http_threads,
        "preload_app": False,
        "timeout": settings.timeout,
        "graceful_timeout": GRACEFUL_SHUTDOWN_SECONDS,
        "keepalive": 5,
        "errorlog": "-",
        "loglevel": "critical" if settings.log_disable else "debug" if settings.debug_logs else "info",
        "proc_name": "vertex-llama",
        "control_socket_disable": True,  # gunicorn's control socket (gunicornc): a file in $HOME that
        # servers started side by side would share; nothing here drives the server through it
    }


def log_options(settings: Settings, environ: Mapping[str, str]) -> LogOptions:
    """The log as the flags ask; JSON lines for Cloud Logging on Vertex AI (AIP_MODE=PREDICTION)."""
    return LogOptions(verbosity=4 if settings.debug_logs else settings.log_verbosity,
                      json_lines=settings.log_jsonl or environ.get("AIP_MODE") == "PREDICTION",
                      disable=settings.log_disable, file=settings.log_file, colors=settings.log_colors.strip().lower(),
                      prefix=settings.log_prefix, timestamps=settings.log_timestamps)


def version_text() -> str:
    """What --version prints: llama-server prints its build; here the packages that make this one."""
    def installed(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return (f"version: vertex-llama {installed('vertex-llama')}\n"
            f"built with llama-cpp-python {installed('llama-cpp-python')} (its vendored llama.cpp)")


def bash_completion(program: str = "python -m app") -> str:
    """A bash completion script for the flags (llama-server's --completion-bash, for this command)."""
    words = " ".join(sorted(flag for option in OPTIONS for flag in (*option.flags, *option.negative_flags)))
    return (f"_vertex_llama_completions() {{\n"
            f"    local current=\"${{COMP_WORDS[COMP_CWORD]}}\"\n"
            f"    if [[ \"$current\" == -* ]]; then\n"
            f"        COMPREPLY=( $(compgen -W \"{words}\" -- \"$current\") )\n"
            f"    else\n"
            f"        COMPREPLY=( $(compgen -f -- \"$current\") )\n"
            f"    fi\n"
            f"}}\n"
            f"complete -F _vertex_llama_completions {program.split()[0]}")


def print_and_exit(settings: Settings) -> None:
    """The flags that print something instead of serving: --version, --list-devices, --cache-list and
    --completion-bash (llama-server's); exits 0 after the first given."""
    if settings.version:
        print(version_text())
    elif settings.list_devices:
        print_devices(settings.rpc_servers)
    elif settings.cache_list:
        models = cached_models(Path(settings.model_cache_dir) if settings.model_cache_dir else default_cache_dir())
        print(f"number of models in cache: {len(models)}")
        for number, name in enumerate(models, 1):
            print(f"{number:4d}. {name}")
    elif settings.completion_bash:
        print(bash_completion())
    else:
        return
    sys.exit(0)


def print_devices(rpc_servers: tuple[str, ...] = ()) -> None:
    """--list-devices: what llama.cpp can offload to (--rpc's servers' devices too), as llama-server prints it."""
    from app.engine.llama.ggml import describe_devices, load_ggml_backends
    from app.engine.llama.rpc import add_rpc_servers

    load_ggml_backends()
    add_rpc_servers(rpc_servers)
    print("Available devices:")
    for line in describe_devices() or ["(none)"]:
        print(f"  {line}")


def prepare(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[Settings, str, VertexEnvironment | None, int]:
    """Everything checked before gunicorn starts; exits 2 on a bad flag, 1 on a bad environment."""
    settings = parse_settings(argv, environ)
    print_and_exit(settings)
    configure_logging(log_options(settings, environ))
    for note in settings.notes:  # llama-server flags that have no effect here
        log.warning("%s", note)
    try:
        settings.all_api_keys()
    except OSError as exc:
        log.error("--api-key-file: %s", exc)
        sys.exit(2)
    except SettingsError as exc:
        log.error("%s", exc)
        sys.exit(2)
    try:  # (that AIP_PREDICT_ROUTE hides no API route is checked by the worker, which imports the routes)
        vertex = read_vertex_environment(environ)
    except VertexEnvironmentError as exc:
        log.error("%s", exc)
        sys.exit(1)
    if vertex is not None and not settings.metrics:
        settings = dataclasses.replace(settings, metrics=True)  # Vertex AI's scraper and autoscaling read them
    if settings.hf_repo is not None:
        return settings, hub_source(settings.hf_repo), vertex, listen_port(settings, vertex)  # the worker fetches it
    if settings.docker_repo is not None:
        return settings, docker_source(settings.docker_repo), vertex, listen_port(settings, vertex)  # the worker too
    if settings.model is None and settings.model_url:
        return settings, settings.model_url, vertex, listen_port(settings, vertex)  # the worker downloads it
    if settings.model is None and vertex is not None and vertex.storage_uri and not settings.is_router:
        settings = router_for_storage(settings, vertex.storage_uri)
    if settings.is_router:
        return settings, "", vertex, listen_port(settings, vertex)  # the worker starts a child per model
    source = settings.model or (vertex.storage_uri if vertex is not None else None)
    if source is None and vertex is not None and vertex.on_platform:
        log.error("no model: this is a Vertex AI deployment and AIP_STORAGE_URI is empty (the Model was uploaded "
                  "without an artifact URI) and no --model / LLAMA_ARG_MODEL is set; upload the Model with "
                  "--artifact-uri gs://BUCKET/DIR (python -m gcp upload --artifact-uri ...) or set LLAMA_ARG_MODEL. "
                  "The embedded demo model is served only outside Vertex AI")
        sys.exit(1)
    try:
        if settings.mmproj is None or not is_gcs_uri(settings.mmproj):
            projector = local_projector(None if is_gcs_uri(source) else source, settings.mmproj, settings.mmproj_auto)
            if projector is not None:
                settings = dataclasses.replace(settings, mmproj=str(projector))
        if is_gcs_uri(source):
            return settings, str(source), vertex, listen_port(settings, vertex)  # downloaded by the worker
        model_path = str(resolve_model_path(source))
    except ModelFileError as exc:
        log.error("%s", exc)
        sys.exit(1)
    return settings, model_path, vertex, listen_port(settings, vertex)


def router_for_storage(settings: Settings, storage_uri: str) -> Settings:
    """On Vertex AI, an ``AIP_STORAGE_URI`` that holds several models starts a router over them (one model
    starts an instance, as ever)."""
    from app.router.catalog import CatalogError, scan_models_dir

    if storage_uri.endswith(".gguf"):  # one file is one model: no listing (nor google-cloud-storage's import)
        return settings
    try:
        models = scan_models_dir(storage_uri)
    except CatalogError:
        return settings  # a single file, or a folder the instance's own checks report on
    if len(models) < 2:
        return settings
    log.info("AIP_STORAGE_URI %s holds %d models (%s): serving them as a router", storage_uri, len(models),
             ", ".join(models))
    return dataclasses.replace(settings, models_dir=storage_uri)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else argv
    try:
        settings, model_path, vertex, port = prepare(arguments, os.environ)
    except SettingsError:
        sys.exit(2)
    # libgomp reads its environment when llama_cpp is first imported: in the worker, which inherits it
    if settings.mmproj_device:  # libmtmd reads its device from the environment (llama-server's --mmproj-device)
        os.environ["MTMD_BACKEND_DEVICE"] = settings.mmproj_device
    prepare_process(settings.compute_cpus, settings.cpu_strict == 1, settings.poll, settings.prio)
    from app.server.gunicorn_server import ContainerServer

    scheme = "https" if settings.ssl_cert_file else "http"
    addresses = ", ".join(f"unix://{host}" if host.endswith(".sock") else f"{scheme}://{bind_address(host, port)}"
                          for host in settings.listen_hosts)
    if settings.is_router:
        log.info("serving as a router on %s: the models of %s", addresses,
                 " and ".join(filter(None, (settings.models_dir, settings.models_preset))))
    else:
        log.info("serving %s on %s (%s slots)", model_path, addresses, settings.slot_count)
    log.info("settings: %s", json.dumps(public_settings(settings), sort_keys=True))
    openmp = describe(os.environ)
    if openmp:
        log.info("llama.cpp's OpenMP threads: %s", openmp)
    json_lines = log_options(settings, os.environ).json_lines
    ContainerServer(settings, model_path, vertex, gunicorn_options(settings, port, json_lines),
                    requested_crash(os.environ), arguments).run()


def requested_crash(environ: Mapping[str, str]) -> Crash | None:
    """The crash the tests ask the worker to have (app/server/fault_injection.py); None outside them."""
    spec = environ.get(CRASH_VARIABLE)
    try:
        return parse_crash(spec) if spec else None
    except CrashSpecError as exc:
        log.error("%s", exc)
        sys.exit(2)


def public_settings(settings: Settings) -> dict[str, Any]:
    """The settings for the log: a secret option (``Option.secret``: API keys, tokens) is never
    written, only whether it is set (for keys, how many there are)."""
    values = dataclasses.asdict(settings)
    for option in OPTIONS:
        if option.secret and values.get(option.dest):
            value = values[option.dest]
            values[option.dest] = f"{len(value)} key(s)" if option.kind == "keys" else "(set, hidden)"
    return values
