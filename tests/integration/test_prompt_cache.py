"""The prompt cache (--cache-ram) on a real server: a long prompt pushed out of the only slot comes
back from host RAM, gives the same greedy answer as when it was decoded cold, and /metrics counts
it; with --cache-ram 0 it is decoded again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.conftest import Server, start

SYSTEM = ("You are a careful assistant for a shipping company. Answer in one short sentence, name the "
          "relevant policy, and never invent tracking numbers. ") * 6


def ask(server: Server, system: str, question: str) -> dict[str, Any]:
    response = requests.post(server.url("/v1/chat/completions"), timeout=120, json={
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 24, "temperature": 0})
    assert response.status_code == 200, response.text[:300]
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture(scope="module")
def cached(server_dir: Path) -> Iterator[Server]:
    running = start(server_dir, ["-np", "1", "-c", "2048", "--cache-ram", "64", "--metrics"])
    yield running
    assert running.stop() == 0, running.log()


def test_a_prompt_pushed_out_of_its_slot_comes_back_from_ram(cached: Server) -> None:
    cold = ask(cached, SYSTEM, "Where is my parcel?")
    ask(cached, "Translate everything into French.", "Bonjour")  # takes the only slot
    warm = ask(cached, SYSTEM, "Where is my parcel?")
    assert warm["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]
    assert cold["timings"]["cache_n"] == 0
    assert warm["timings"]["cache_n"] == warm["usage"]["prompt_tokens"] - 1 > 150
    assert cached.metric("llamacpp:prompt_cache_restores_total") >= 1
    assert cached.metric("llamacpp:prompt_tokens_cached_total") >= warm["timings"]["cache_n"]
    assert cached.metric("llamacpp:prompt_cache_bytes") > 0


def test_another_question_on_the_same_system_prompt_restores_the_prefix(cached: Server) -> None:
    ask(cached, SYSTEM, "How long does delivery take?")
    ask(cached, "Write a haiku.", "About rain")
    warm = ask(cached, SYSTEM, "Can I change the address?")
    assert warm["timings"]["cache_n"] > 150  # the system prompt, restored into the slot


def test_with_the_cache_off_the_prompt_is_decoded_again(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "1", "-c", "2048", "--cache-ram", "0", "--metrics"])
    try:
        ask(server, SYSTEM, "Where is my parcel?")
        ask(server, "Translate everything into French.", "Bonjour")
        again = ask(server, SYSTEM, "Where is my parcel?")
        assert again["timings"]["cache_n"] < 10  # only the template's first tokens, shared by chance
        assert server.metric("llamacpp:prompt_cache_restores_total") == 0
    finally:
        assert server.stop() == 0
