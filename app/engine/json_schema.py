"""JSON-schema rewrites applied before the schema is turned into a grammar.

llama-cpp-python's schema converter ignores ``minimum``/``maximum`` on integers. A bounded integer
range of up to ``MAX_ENUMERATED`` values is rewritten as an ``enum`` of those values, which the
converter does enforce. Wider ranges and bounds on non-integer numbers are not enforced by the
grammar (documented in the README).
"""

from __future__ import annotations

import math
from typing import Any

from app.engine.backend import Vocabulary

MAX_ENUMERATED = 1000

_NESTED_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_NESTED_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_NESTED_ONE = ("items", "additionalProperties", "not", "contains", "if", "then", "else")


def _bounds(schema: dict[str, Any]) -> tuple[int, int] | None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if "exclusiveMinimum" in schema and isinstance(schema["exclusiveMinimum"], int | float):
        low = math.floor(schema["exclusiveMinimum"]) + 1
    if "exclusiveMaximum" in schema and isinstance(schema["exclusiveMaximum"], int | float):
        high = math.ceil(schema["exclusiveMaximum"]) - 1
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return None
    return math.ceil(low), math.floor(high)


def schema_grammar(vocab: Vocabulary, schema: Any) -> str:
    """GBNF for a JSON schema (tightened first); ValueError for a schema that cannot be converted."""
    return vocab.json_schema_grammar(tighten(schema))


def tighten(schema: Any) -> Any:
    """A copy of ``schema`` with small integer ranges spelled out as enums."""
    if isinstance(schema, list):
        return [tighten(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _NESTED_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: tighten(value) for name, value in out[key].items()}
    for key in _NESTED_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [tighten(value) for value in out[key]]
    for key in _NESTED_ONE:
        if isinstance(out.get(key), dict | list):
            out[key] = tighten(out[key])
    bounds = _bounds(out) if out.get("type") == "integer" and "enum" not in out else None
    if bounds is not None and 0 <= bounds[1] - bounds[0] < MAX_ENUMERATED:
        for key in ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            out.pop(key, None)
        out["enum"] = list(range(bounds[0], bounds[1] + 1))
    return out
