"""The OpenAPI 3.1 document of the server, generated from the route table and the request
schemas the handlers validate with (pydantic). Every route is listed with its method, request
body, success content and llama-server's error body."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from app.protocol.api import Route

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "integer"},
                "message": {"type": "string"},
                "type": {"type": "string"},
                "n_prompt_tokens": {"type": "integer"},
                "n_ctx": {"type": "integer"},
            },
            "required": ["code", "message", "type"],
        }
    },
    "required": ["error"],
}
# One server-sent event, as OpenAPI before 3.2 reads a text/event-stream schema: a schema per event.
SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}, "id": {"type": "string"},
                   "retry": {"type": "integer"}},
    "required": ["data"],
}
TEXT_ROUTES = {"/metrics"}


def _openapi_path(path: str) -> str:
    return re.sub(r":(\w+)", r"{\1}", path)


def _operation_id(route: Route) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "_", route.path).strip("_") or "root"
    return f"{route.method.lower()}_{slug}"


def _body_schema(route: Route, components: dict[str, Any]) -> dict[str, Any]:
    assert route.body is not None
    schema = route.body.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in schema.pop("$defs", {}).items():
        components[name] = definition
    name = route.body.__name__
    components[name] = schema
    return {"$ref": f"#/components/schemas/{name}"}


def _success(route: Route) -> dict[str, Any]:
    if route.path in TEXT_ROUTES:
        content: dict[str, Any] = {"text/plain": {"schema": {"type": "string"}}}
    else:
        content = {"application/json": {"schema": {}}}
    if route.streams:
        content["text/event-stream"] = {"schema": SSE_EVENT}
    return {"description": "OK", "content": content}


def openapi_document(routes: Sequence[Route], prefix: str = "", title: str = "vertex-llama",
                     version: str = "0.1.0") -> dict[str, Any]:
    components: dict[str, Any] = {"Error": ERROR_SCHEMA}
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        operation: dict[str, Any] = {
            "operationId": _operation_id(route),
            "summary": route.summary or route.name,
            "responses": {
                "200": _success(route),
                "default": {"description": "An error (llama-server's error body)",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
            },
        }
        if not route.public:
            operation["security"] = [{"bearer": []}, {"apiKey": []}, {}]
        parameters = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                      for name in re.findall(r":(\w+)", route.path)]
        if route.path == "/slots/:id_slot":
            parameters.append({"name": "action", "in": "query", "required": True,
                               "schema": {"type": "string", "enum": ["save", "restore", "erase"]}})
        if parameters:
            operation["parameters"] = parameters
        if route.body is not None:
            operation["requestBody"] = {"required": route.method == "POST",
                                        "content": {"application/json": {"schema": _body_schema(route, components)}}}
        paths.setdefault(prefix + _openapi_path(route.path), {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version,
                 "description": "llama-server's HTTP API and Vertex AI's prediction protocol, over llama.cpp."},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "apiKey": {"type": "apiKey", "in": "header", "name": "X-Api-Key"}},
        },
    }
