"""Vertex AI's prediction protocol on top of the route table.

Rule: this package sees only ``app.api`` (the Route, ApiRequest and ApiReply types). It never
imports a handler or the engine and never re-enters HTTP: a predict instance calls
``route.handler(internal_request)`` directly. The ``AIP_*`` environment is read here and nowhere
else (``environment.py``).
"""

from typing import TYPE_CHECKING, Any

from gcp.environment import VertexEnvironment, VertexEnvironmentError, read_vertex_environment

if TYPE_CHECKING:
    from gcp.aliases import AliasTable, derive_alias
    from gcp.predict import vertex_routes

_LAZY = {"AliasTable": "gcp.aliases", "derive_alias": "gcp.aliases", "vertex_routes": "gcp.predict"}


def __getattr__(name: str) -> Any:
    """The route-table side (pydantic, app.api) on first use: the server's master process reads only the
    environment, and the worker imports the rest while its model loads."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gcp' has no attribute {name!r}")

__all__ = [
    "AliasTable",
    "VertexEnvironment",
    "VertexEnvironmentError",
    "derive_alias",
    "read_vertex_environment",
    "vertex_routes",
]
