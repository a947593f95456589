"""A corpus of malformed requests across the routes and the predict envelope. Each gets a 4xx JSON
error that says what is wrong; afterwards the server is healthy, serves a normal request, and no
slot is left busy."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from tests.integration.conftest import Server

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]


def j(value: Any) -> bytes:
    return json.dumps(value).encode()


def nested(depth: int) -> bytes:
    return b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"


CORPUS: list[tuple[str, str, bytes, dict[str, str]]] = [
    # not JSON at all, or not valid JSON
    ("POST", CHAT, b"", {}),
    ("POST", CHAT, b"{", {}),
    ("POST", CHAT, b"not json", {}),
    ("POST", CHAT, b'{"messages": [}', {}),
    ("POST", CHAT, b"\xff\xfe\xfd", {}),
    ("POST", CHAT, b'{"messages": "\xc3\x28"}', {}),
    ("POST", "/completion", b'{"prompt": NaN}', {}),
    ("POST", "/completion", b'{"prompt": "x", "temperature": Infinity}', {}),
    ("POST", "/completion", b'{"prompt": "x", "top_p": -Infinity}', {}),
    ("POST", "/completion", b"[1, 2, 3]", {}),
    ("POST", "/completion", b'"just a string"', {}),
    ("POST", "/tokenize", b"null", {"Content-Type": "application/json"}),
    ("POST", CHAT, nested(5000), {}),
    # wrong types and nulls
    ("POST", CHAT, j({"messages": None}), {}),
    ("POST", CHAT, j({"messages": 42}), {}),
    ("POST", CHAT, j({"messages": [None]}), {}),
    ("POST", CHAT, j({"messages": [{"role": None, "content": "x"}]}), {}),
    ("POST", CHAT, j({"messages": [{"role": "user", "content": 5}]}), {}),
    ("POST", CHAT, j({"messages": MSG, "max_tokens": "ten"}), {}),
    ("POST", CHAT, j({"messages": MSG, "stream": "yes please"}), {}),
    ("POST", CHAT, j({"messages": MSG, "stop": {"a": 1}}), {}),
    ("POST", CHAT, j({"messages": MSG, "tools": "all"}), {}),
    ("POST", CHAT, j({"messages": MSG, "response_format": "json"}), {}),
    ("POST", CHAT, j({"messages": MSG, "logit_bias": [1, 2, 3]}), {}),
    ("POST", "/completion", j({"prompt": True}), {}),
    ("POST", "/completion", j({"prompt": [1.5, 2.5]}), {}),
    ("POST", "/completion", j({"prompt": "x", "seed": [1]}), {}),
    ("POST", "/tokenize", j({"content": {"x": 1}}), {}),
    ("POST", "/detokenize", j({"tokens": "1,2,3"}), {}),
    ("POST", "/detokenize", j({"tokens": [None]}), {}),
    ("POST", "/apply-template", j({"messages": [{"role": "user", "content": [{"type": 7}]}]}), {}),
    # huge and negative numbers
    ("POST", CHAT, j({"messages": MSG, "max_tokens": -5}), {}),
    ("POST", CHAT, j({"messages": MSG, "n": 10**12}), {}),
    ("POST", CHAT, j({"messages": MSG, "seed": 2**40}), {}),
    ("POST", CHAT, j({"messages": MSG, "top_logprobs": 10**6, "logprobs": True}), {}),
    ("POST", "/completion", j({"prompt": "x", "id_slot": 10**9}), {}),
    ("POST", "/completion", j({"prompt": [10**12]}), {}),
    ("POST", "/completion", j({"prompt": [-1]}), {}),
    ("POST", "/completion", j({"prompt": "x", "n_indent": -3}), {}),
    ("POST", "/detokenize", j({"tokens": [-7]}), {}),
    ("POST", "/v1/embeddings", j({"input": "x", "dimensions": -1}), {}),
    # empty, over-long and huge content
    ("POST", "/completion", j({"prompt": ""}), {}),
    ("POST", "/completion", j({"prompt": []}), {}),
    ("POST", CHAT, j({"messages": [{}]}), {}),
    ("POST", CHAT, j({"messages": [{"role": "user", "content": "word " * 3000}]}), {}),
    ("POST", "/completion", j({"prompt": "x" * (10 * 1024 * 1024)}), {}),
    ("POST", "/v1/embeddings", j({"input": []}), {}),
    ("POST", "/v1/embeddings", j({"input": "word " * 2000}), {}),
    ("POST", "/v1/responses", j({"input": 5}), {}),
    ("POST", "/v1/messages", j({"messages": [{"role": "user"}], "max_tokens": 5}), {}),
    # unknown formats, fields and routes
    ("POST", CHAT, j({"messages": MSG, "response_format": {"type": "yaml"}}), {}),
    ("POST", CHAT, j({"messages": MSG, "tool_choice": "whenever", "tools": [
        {"type": "function", "function": {"name": "f"}}]}), {}),
    ("POST", CHAT, j({"messages": [{"role": "robot", "content": "beep"}]}), {}),
    ("POST", "/completion", j({"prompt": "x", "samplers": ["telepathy"]}), {}),
    ("POST", "/completion", j({"prompt": "x", "grammar": "root ::= [unterminated"}), {}),
    ("POST", "/completion", j({"prompt": "x", "json_schema": {"type": "integer", "minimum": "zero"},
                               "grammar": "root ::= \"a\""}), {}),
    ("GET", "/no/such/route", b"", {}),
    ("DELETE", CHAT, b"", {}),
    ("PUT", "/completion", j({"prompt": "x"}), {}),
    ("GET", "/tokenize", b"", {}),
    # the predict envelope
    ("POST", "/predict", b"{nope", {}),
    ("POST", "/predict", j([1, 2]), {}),
    ("POST", "/predict", j({"instances": "all of them"}), {}),
    ("POST", "/predict", j({"instances": [{"@requestFormat": "health"}] * 129}), {}),
    ("POST", "/predict", j({"instances": [], "parameters": [1]}), {}),
    ("POST", "/predict", j({"instances": [{"@requestFormat": "chatCompletions", "messages": MSG,
                                            "stream": True}] * 2}), {}),
    ("POST", "/predict", j({"messages": "raw but wrong"}), {}),
    ("POST", "/predict", b'{"instances": [' + b"1," * 10 + b"]}", {}),
    # bad headers
    ("POST", CHAT, j({"messages": MSG}), {"Content-Type": "text/plain"}),
    ("POST", CHAT, b"\x00\x01\x02", {"Content-Type": "application/octet-stream"}),
    ("POST", "/completion", b'{"prompt": "caf\xe9"}', {"Content-Type": "application/json; charset=latin-1"}),
]


def test_the_corpus_is_big_enough() -> None:
    assert len(CORPUS) >= 60


@pytest.mark.parametrize(("method", "path", "data", "headers"), CORPUS, ids=range(len(CORPUS)))
def test_malformed_requests_get_a_4xx_naming_the_problem(
    vertex_server: Server, method: str, path: str, data: bytes, headers: dict[str, str]
) -> None:
    sent = {"Content-Type": "application/json", **headers}
    response = requests.request(method, vertex_server.url(path), data=data, headers=sent, timeout=60)
    if response.status_code == 200 and path == "/predict":
        # a well-formed envelope whose instances are bad: the failures are per instance
        predictions = response.json()["predictions"]
        assert predictions and all("error" in p and 400 <= p["error"]["code"] < 500 for p in predictions)
        return
    if response.status_code == 200 and headers.get("Content-Type") == "text/plain":
        return  # a JSON body is read as JSON whatever type it declares (as llama-server does)
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error["code"] == response.status_code
    assert error["type"] and len(error["message"]) > 5


def test_the_server_is_fine_afterwards(vertex_server: Server) -> None:
    assert requests.get(vertex_server.url("/health"), timeout=10).status_code == 200
    reply = requests.post(vertex_server.url(CHAT), json={"messages": MSG, "max_tokens": 4}, timeout=60)
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
    slots = requests.get(vertex_server.url("/slots"), timeout=10).json()
    assert not any(slot["is_processing"] for slot in slots)
