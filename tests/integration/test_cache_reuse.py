"""--cache-reuse on the real model: a prompt whose middle part is gone (an old chat turn dropped)
reuses the cached tokens that followed it, moved in the KV cells, instead of computing them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import requests

from tests.integration.conftest import Server, start

HEAD = "You are a helpful assistant. Answer in one sentence.\n"
DROPPED = "An old question that the next request no longer carries, with some words in it.\n"
DOCUMENT = ("The lighthouse keeper climbed the spiral stairs every evening, lit the great lamp, and watched the "
            "ships pass the rocks until dawn. ") * 4 + "Question: what did the keeper do each evening?\n"


def complete(server: Server, prompt: str, **fields: Any) -> dict[str, Any]:
    reply = requests.post(server.url("/completion"), timeout=120, json={
        "prompt": prompt, "n_predict": 8, "temperature": 0, "ignore_eos": True, **fields})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def test_a_dropped_middle_keeps_what_followed_it(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "1", "-c", "2048", "--cache-reuse", "16", "-cram", "0"])
    try:
        complete(server, HEAD + DROPPED + DOCUMENT)
        reused = complete(server, HEAD + DOCUMENT)
        document_tokens = len(requests.post(server.url("/tokenize"), json={"content": DOCUMENT},
                                            timeout=10).json()["tokens"])
        assert reused["timings"]["cache_n"] >= document_tokens  # the head and the moved document
        assert reused["timings"]["prompt_n"] < 8 and reused["content"]
        complete(server, HEAD + DROPPED + DOCUMENT)
        asked_off = complete(server, HEAD + DOCUMENT, n_cache_reuse=0)  # the request's own value wins
        assert asked_off["timings"]["prompt_n"] >= document_tokens
    finally:
        assert server.stop() == 0, server.log()
