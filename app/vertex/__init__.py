"""Vertex AI's prediction protocol on top of the route table.

Rule: this package sees only ``app.protocol.api`` (the Route, ApiRequest and ApiReply types). It never
imports a handler or the engine and never re-enters HTTP: a predict instance calls
``route.handler(internal_request)`` directly. The ``AIP_*`` environment is read here and nowhere
else (``environment.py``).
"""

from typing import TYPE_CHECKING, Any

from app.vertex.environment import VertexEnvironment, VertexEnvironmentError, read_vertex_environment

if TYPE_CHECKING:
    from app.vertex.aliases import AliasTable, derive_alias
    from app.vertex.predict import vertex_routes

_LAZY = {
    "AliasTable": "app.vertex.aliases",
    "derive_alias": "app.vertex.aliases",
    "vertex_routes": "app.vertex.predict",
}


def __getattr__(name: str) -> Any:
    """The route-table side (pydantic, app.protocol.api) on first use: the server's master process reads
    only the environment, and the worker imports the rest while its model loads."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'app.vertex' has no attribute {name!r}")

__all__ = [
    "AliasTable",
    "VertexEnvironment",
    "VertexEnvironmentError",
    "derive_alias",
    "read_vertex_environment",
    "vertex_routes",
]
