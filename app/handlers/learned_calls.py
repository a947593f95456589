"""Tool calls in a format learned from the chat template (app/templating/call_format.py): a grammar that
lets the model write only valid calls in it (``tool_choice`` required or a named function), and the
parsed calls' arguments typed by the tools' schemas (tagged values arrive as text)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from app.engine import Vocabulary
from app.engine.json_schema import schema_grammar
from app.templating.call_format import CallFormat, ParsedCall

_GBNF_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[A-Za-z0-9_-]+|.', re.DOTALL)


def gbnf_literal(text: str) -> str:
    """A GBNF literal (a JSON string literal is one); empty text is no element at all."""
    return json.dumps(text) if text else ""


def _sequence(*parts: str) -> str:
    return " ".join(part for part in parts if part)


def renamed(grammar: str, prefix: str) -> str:
    """A GBNF grammar with every rule it defines renamed ``prefix`` + name (its root too), so that several
    can be joined into one."""
    defined = set(re.findall(r"^([A-Za-z0-9_-]+)\s*::=", grammar, flags=re.MULTILINE))
    return "".join(prefix + token if token in defined else token for token in _GBNF_TOKEN.findall(grammar))


def _nested(path: Sequence[str], value: dict[str, Any]) -> dict[str, Any]:
    """A schema that puts ``value`` at ``path`` of an object."""
    for key in reversed(path):
        value = {"type": "object", "properties": {key: value}, "required": [key]}
    return value


def _merged(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    """Two object schemas made by ``_nested`` joined (their paths share a start: {"function": {...}})."""
    properties = dict(left.get("properties", {}))
    for key, value in right.get("properties", {}).items():
        properties[key] = _merged(properties[key], value) if key in properties else value
    return {"type": "object", "properties": properties,
            "required": sorted(set(left.get("required", [])) | set(right.get("required", [])))}


def learned_grammar(learned: CallFormat, tools: Sequence[tuple[str, dict[str, Any]]], parallel: bool,
                    vocab: Vocabulary) -> str:
    """GBNF for one call (or, ``parallel``, several) of ``tools`` (name, parameters schema) in ``learned``."""
    rules: list[str] = []
    alternatives = []
    for index, (name, parameters) in enumerate(tools):
        prefix = f"t{index}-"
        if learned.arguments == "object":
            schema = _merged(_nested(learned.name_path, {"const": name}), _nested(learned.arguments_path, parameters))
            rules.append(renamed(schema_grammar(vocab, schema), prefix))
            alternatives.append(_sequence(gbnf_literal(learned.call_start), f"{prefix}root",
                                          gbnf_literal(learned.call_end)))
            continue
        head = _sequence(gbnf_literal(learned.call_start), gbnf_literal(name), gbnf_literal(learned.name_end))
        if learned.arguments == "json":
            rules.append(renamed(schema_grammar(vocab, parameters), prefix))
            alternatives.append(_sequence(head, f"{prefix}root", gbnf_literal(learned.call_end)))
        else:
            pairs, pair_rules = _tagged_pairs(learned, parameters, prefix, vocab)
            rules.extend(pair_rules)
            alternatives.append(_sequence(head, pairs, gbnf_literal(learned.call_end)))
    more = (f"({_sequence(gbnf_literal(learned.separator), 'call')})*"
            if parallel and learned.separator is not None else "")
    root = "root ::= " + _sequence(gbnf_literal(learned.section_start), "call", more, gbnf_literal(learned.section_end))
    return "\n".join([root, "call ::= " + " | ".join(f"({alternative})" for alternative in alternatives), *rules])


def _tagged_pairs(learned: CallFormat, parameters: dict[str, Any], prefix: str,
                  vocab: Vocabulary) -> tuple[str, list[str]]:
    """The tagged (or keyword) arguments of one tool: each required parameter once, in order, then up to as
    many optional ones as there are (with the template's separator between two pairs); a tagged value as its
    schema allows (one of an enum, a number, a boolean) or text up to the tag, a keyword's value the JSON its
    schema allows (a JSON literal is a Python one, but for true/false/null, which the reader takes too)."""
    properties = parameters.get("properties", {}) if isinstance(parameters.get("properties"), dict) else {}
    required = [key for key in parameters.get("required", []) if key in properties]
    optional = [key for key in properties if key not in required]
    stop = (learned.value_end.strip() or "<")[0]
    rules = []
    for index, key in enumerate(properties):
        key_end, value_end = learned.key_end, learned.value_closing(key)
        if learned.typed_key_end is not None and _not_text(properties[key]):
            key_end, value_end = learned.typed_key_end, learned.typed_value_end
        value = _value_rule(properties[key], stop)
        if learned.arguments == "python":
            value = f"{prefix}p{index}-root"
            schema = properties[key] if isinstance(properties[key], dict) else {}
            rules.append(renamed(schema_grammar(vocab, schema), f"{prefix}p{index}-"))
        rules.append(f"{prefix}p{index} ::= " + _sequence(
            gbnf_literal(learned.key_start), gbnf_literal(key), gbnf_literal(key_end), value,
            gbnf_literal(value_end)))
    names = {key: f"{prefix}p{index}" for index, key in enumerate(properties)}
    separator = gbnf_literal(learned.pair_separator)
    sequence = [names[key] if index == 0 else _sequence(separator, names[key]) for index, key in enumerate(required)]
    if optional:
        rules.append(f"{prefix}optional ::= " + " | ".join(names[key] for key in optional))
        if not required and separator:  # the first pair has no separator before it
            sequence.append(f"({prefix}optional ({separator} {prefix}optional){{0,{len(optional) - 1}}})?")
        else:
            sequence.append(f"({_sequence(separator if required else '', f'{prefix}optional')}){{0,{len(optional)}}}")
    return _sequence(*sequence), rules


def _value_rule(schema: Any, stop: str) -> str:
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return "(" + " | ".join(gbnf_literal(value if isinstance(value, str) else json.dumps(value))
                                for value in schema["enum"]) + ")"
    text = f"[^{gbnf_class_char(stop)}]*"  # up to the tag that closes the value
    kind = schema.get("type")
    return _TYPED_VALUES.get(kind, text) if isinstance(kind, str) else text


def _not_text(schema: Any) -> bool:
    """A parameter whose values are numbers or booleans (written as the template writes a number)."""
    if not isinstance(schema, dict):
        return False
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return not any(isinstance(value, str) for value in enum)
    return schema.get("type") in _TYPED_VALUES


_TYPED_VALUES = {  # a tagged value of these types, written as JSON writes it
    "integer": '("-"? ("0" | [1-9] [0-9]{0,17}))',
    "number": '("-"? ("0" | [1-9] [0-9]{0,17}) ("." [0-9]{1,18})?)',
    "boolean": '("true" | "false")',
}


def gbnf_class_char(char: str) -> str:
    """A character as it stands in a GBNF character class."""
    return "\\" + char if char in "]\\^-" else char


def typed_arguments(call: ParsedCall, parameters: dict[str, Any]) -> Any:
    """A call's arguments with tagged values (text) read as JSON where the tool's schema says the
    parameter is not a string."""
    if not isinstance(call.arguments, dict) or not all(isinstance(value, str) for value in call.arguments.values()):
        return call.arguments
    properties = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
    typed: dict[str, Any] = {}
    for key, value in call.arguments.items():
        kind = properties.get(key, {}).get("type") if isinstance(properties.get(key), dict) else None
        typed[key] = value if kind in (None, "string") or (isinstance(kind, list) and "string" in kind) \
            else _json_or_text(value)
    return typed


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value
