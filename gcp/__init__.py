"""Vertex AI's prediction protocol on top of the route table.

Rule: this package sees only ``app.api`` (the Route, ApiRequest and ApiReply types). It never
imports a handler or the engine and never re-enters HTTP: a predict instance calls
``route.handler(internal_request)`` directly. The ``AIP_*`` environment is read here and nowhere
else (``environment.py``).
"""

from gcp.aliases import AliasTable, derive_alias
from gcp.environment import VertexEnvironment, VertexEnvironmentError, read_vertex_environment
from gcp.predict import vertex_routes

__all__ = [
    "AliasTable",
    "VertexEnvironment",
    "VertexEnvironmentError",
    "derive_alias",
    "read_vertex_environment",
    "vertex_routes",
]
