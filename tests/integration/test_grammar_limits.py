"""Grammars that once crashed the worker (llama.cpp's grammar parser recursing past the engine
thread's stack, SIGSEGV, every request in flight lost), sent through every door a grammar has:
``response_format``, ``json_schema``, ``grammar``, tool parameters, Anthropic tools and a Vertex
predict instance; then a fuzzed family of schemas. After each the same worker is alive and answers."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
import requests

from tests.integration.conftest import Server

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "Say something."}]


def worker_pids(server: Server) -> list[str]:
    return re.findall(r"Booting worker with pid: (\d+)", server.log())


def schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def nested_grammar(depth: int) -> str:
    return "root ::= " + "(" * depth + '"a"' + ")" * depth + "\n"


def chained_grammar(length: int) -> str:
    return "root ::= r0\n" + "".join(f'r{i} ::= "x"? r{i + 1}\n' for i in range(length)) + f'r{length} ::= "a"\n'


def tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "note", "parameters": parameters}}


LONG_STRING = {"type": "string", "maxLength": 20000}

# (path, body, the status it gets, a word its error names): each once killed the worker or nearly did
CASES: list[tuple[str, dict[str, Any], int, str]] = [
    (CHAT, {"messages": MSG, "max_tokens": 8, "response_format": schema_format(LONG_STRING)}, 200, ""),
    (CHAT, {"messages": MSG, "max_tokens": 8, "response_format": schema_format(
        {"type": "string", "maxLength": 65535})}, 200, ""),
    (CHAT, {"messages": MSG, "max_tokens": 8, "response_format": schema_format(
        {"type": "array", "items": {"type": "integer"}, "maxItems": 50000})}, 200, ""),
    (CHAT, {"messages": MSG, "max_tokens": 8, "response_format": schema_format(
        {"type": "string", "pattern": "^a{0,30000}$"})}, 200, ""),
    ("/completion", {"prompt": "x", "n_predict": 8, "json_schema": LONG_STRING}, 200, ""),
    (CHAT, {"messages": MSG, "max_tokens": 8, "tool_choice": "required",
            "tools": [tool({"type": "object", "properties": {"text": LONG_STRING}, "required": ["text"]})]}, 200, ""),
    ("/v1/messages", {"model": "m", "max_tokens": 8, "messages": MSG, "tool_choice": {"type": "any"}, "tools": [
        {"name": "note", "input_schema": {"type": "object", "properties": {"text": LONG_STRING}}}]}, 200, ""),
    (CHAT, {"messages": MSG, "max_tokens": 8, "response_format": schema_format(
        {"type": "string", "minLength": 5000})}, 400, "5000"),
    ("/completion", {"prompt": "x", "n_predict": 8, "grammar": nested_grammar(100_000)}, 400, "deep"),
    ("/completion", {"prompt": "x", "n_predict": 8, "grammar": nested_grammar(20_000)}, 400, "deep"),
    ("/completion", {"prompt": "x", "n_predict": 8, "grammar": chained_grammar(100_000)}, 400, "chain"),
]


@pytest.mark.parametrize(("path", "body", "status", "named"), CASES, ids=range(len(CASES)))
def test_a_grammar_that_crashed_the_worker_is_served_or_refused(
    vertex_server: Server, path: str, body: dict[str, Any], status: int, named: str
) -> None:
    workers = worker_pids(vertex_server)
    response = requests.post(vertex_server.url(path), json=body, timeout=300)
    assert response.status_code == status, response.text[:500]
    if status >= 400:
        error = response.json()["error"]
        assert error["code"] == status and named in error["message"], error
    assert requests.get(vertex_server.url("/health"), timeout=30).status_code == 200
    assert worker_pids(vertex_server) == workers, vertex_server.log()[-3000:]


def test_a_schema_with_a_long_bound_still_holds_its_shape(vertex_server: Server) -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "maxLength": 20000, "pattern": "^[a-z]+$"},
                                               "n": {"type": "integer"}}, "required": ["code", "n"]}
    reply = requests.post(vertex_server.url(CHAT), json={
        "messages": MSG, "max_tokens": 200, "temperature": 0, "response_format": schema_format(schema)}, timeout=300)
    assert reply.status_code == 200, reply.text[:300]
    choice = reply.json()["choices"][0]
    if choice["finish_reason"] == "stop":  # complete: the grammar held it to the schema
        answer = json.loads(choice["message"]["content"])
        assert re.fullmatch("[a-z]+", answer["code"]) and isinstance(answer["n"], int)
    else:  # cut by max_tokens: still a prefix the grammar allows
        assert choice["message"]["content"].startswith('{')


def test_a_vertex_instance_with_a_long_bound_is_answered(vertex_server: Server) -> None:
    instance = {"@requestFormat": "chatCompletions", "messages": MSG, "max_tokens": 8,
                "response_format": schema_format(LONG_STRING)}
    nested = {"@requestFormat": "completion", "prompt": "x", "n_predict": 4, "grammar": nested_grammar(50_000)}
    reply = requests.post(vertex_server.url("/predict"), json={"instances": [instance, nested]}, timeout=300)
    assert reply.status_code == 200, reply.text[:300]
    chat, refused = reply.json()["predictions"]
    assert chat["choices"][0]["message"]["content"].startswith('"')
    assert refused["error"]["code"] == 400 and "deep" in refused["error"]["message"]


def fuzzed_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """A random schema with large or odd bounds, nested a few levels."""
    bound = rng.choice([0, 1, 2, 7, 1999, 2000, 2001, 65535, 10**9])
    kind = rng.choice(["string", "array", "object", "pattern", "integer"] if depth < 3 else ["string", "integer"])
    if kind == "string":
        return {"type": "string", "minLength": rng.choice([0, 1, 3]), "maxLength": bound}
    if kind == "pattern":
        return {"type": "string", "pattern": f"^(ab|c){{{rng.choice([0, 2])},{bound}}}$"}
    if kind == "integer":
        return {"type": "integer", "minimum": -bound, "maximum": bound}
    if kind == "array":
        return {"type": "array", "items": fuzzed_schema(rng, depth + 1), "minItems": rng.choice([0, 1]),
                "maxItems": bound}
    names = [f"p{i}" for i in range(rng.randint(1, 4))]
    return {"type": "object", "properties": {name: fuzzed_schema(rng, depth + 1) for name in names},
            "required": names[:1]}


def test_a_fuzzed_family_of_schemas_never_takes_the_worker_down(vertex_server: Server) -> None:
    rng = random.Random(20261204)
    workers = worker_pids(vertex_server)
    statuses = []
    for _ in range(24):
        body = {"messages": MSG, "max_tokens": 4, "response_format": schema_format(fuzzed_schema(rng))}
        response = requests.post(vertex_server.url(CHAT), json=body, timeout=300)
        assert response.status_code in (200, 400), response.text[:300]
        if response.status_code == 400:
            assert "json_schema" in response.json()["error"]["message"] or "grammar" in response.text
        statuses.append(response.status_code)
    assert statuses.count(200) >= 12, statuses  # most are served: large bounds are not refused
    assert requests.get(vertex_server.url("/health"), timeout=30).status_code == 200
    assert worker_pids(vertex_server) == workers
