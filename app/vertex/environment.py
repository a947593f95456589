"""The AIP_* variables Vertex AI sets for a custom container, read once at start-up."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


class VertexEnvironmentError(ValueError):
    """An AIP_* variable cannot be used; the message names it."""


# Set by Vertex AI itself on a deployment and not configurable; a local run with AIP_MODE sets none.
PLATFORM_VARIABLES = ("AIP_DEPLOYED_MODEL_ID", "AIP_ENDPOINT_ID", "AIP_PROJECT_NUMBER", "AIP_MODE_VERSION",
                      "AIP_FRAMEWORK")


@dataclass(frozen=True)
class VertexEnvironment:
    port: int
    predict_route: str
    health_route: str | None
    storage_uri: str | None
    on_platform: bool = False  # deployed by Vertex AI (not a local run with AIP_MODE set)

    def check_routes(self, existing_paths: Iterable[str]) -> None:
        """A predict route that is already an API route would hide it: refuse to start."""
        if self.predict_route in set(existing_paths):
            raise VertexEnvironmentError(
                f"AIP_PREDICT_ROUTE={self.predict_route} conflicts with an existing llama-server route"
            )


def _route(value: str) -> str:
    return value if value.startswith("/") else "/" + value


def read_vertex_environment(environ: Mapping[str, str]) -> VertexEnvironment | None:
    """The Vertex settings, or ``None`` unless ``AIP_MODE`` is exactly ``PREDICTION``.
    An empty variable counts as unset."""
    if environ.get("AIP_MODE") != "PREDICTION":
        return None
    raw_port = environ.get("AIP_HTTP_PORT") or "8080"
    try:
        port = int(raw_port)
    except ValueError:
        raise VertexEnvironmentError(f"AIP_HTTP_PORT={raw_port!r} is not a port number") from None
    if not 0 < port < 65536:
        raise VertexEnvironmentError(f"AIP_HTTP_PORT={port} is not a valid port")
    health = environ.get("AIP_HEALTH_ROUTE") or None
    return VertexEnvironment(
        port=port,
        predict_route=_route(environ.get("AIP_PREDICT_ROUTE") or "/predict"),
        health_route=_route(health) if health else None,
        storage_uri=environ.get("AIP_STORAGE_URI") or None,
        on_platform=any(environ.get(name) for name in PLATFORM_VARIABLES),
    )
