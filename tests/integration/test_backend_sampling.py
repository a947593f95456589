"""-bs/--backend-sampling on the real model: the sampler chain runs in the model's graph (llama.cpp's
backend sampling, attached to the slot's sequence for the job) and llama.cpp hands back the token it
picked; a request's backend_sampling turns it off or on; a grammar, a reasoning budget or n_probs sample
on the CPU, as llama-server decides. llama.cpp's debug lines (-v) say which tokens the graph picked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.conftest import Server, start

PICKED = "Backend sampler selected token"
MESSAGES = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def server(server_dir: Path) -> Iterator[Server]:
    running = start(server_dir, ["-bs", "-v", "-np", "2", "-c", "2048"])
    yield running
    assert running.stop() == 0, running.log()


def chat(server: Server, **extra: Any) -> tuple[dict[str, Any], int]:
    """The answer, and how many tokens the graph picked while it ran."""
    before = server.log().count(PICKED)
    body = {"messages": MESSAGES, "max_tokens": 12, "temperature": 0, **extra}
    reply = requests.post(server.url("/v1/chat/completions"), json=body, timeout=120)
    assert reply.status_code == 200, reply.text[:300]
    return reply.json(), server.log().count(PICKED) - before


def text(answer: dict[str, Any]) -> str:
    content: str = answer["choices"][0]["message"]["content"]
    return content


def test_the_default_is_shown_and_the_graph_picks_the_tokens(server: Server) -> None:
    params = requests.get(server.url("/props"), timeout=10).json()["default_generation_settings"]["params"]
    assert params["backend_sampling"] is True
    answer, picked = chat(server)
    assert picked == answer["usage"]["completion_tokens"] >= 1


def test_greedy_output_is_the_cpus(server: Server) -> None:
    on, picked_on = chat(server)
    off, picked_off = chat(server, backend_sampling=False)
    assert text(on) == text(off)
    assert picked_on > 0 and picked_off == 0


def test_a_seed_reproduces_with_the_graphs_sampler(server: Server) -> None:
    first, picked = chat(server, temperature=0.9, seed=42, max_tokens=16)
    again, _ = chat(server, temperature=0.9, seed=42, max_tokens=16)
    assert picked > 0 and text(first) == text(again)


@pytest.mark.parametrize("extra", [
    {"response_format": {"type": "json_object"}},
    {"logprobs": True, "top_logprobs": 2},
], ids=["grammar", "n_probs"])
def test_what_the_graph_cannot_do_samples_on_the_cpu(server: Server, extra: dict[str, Any]) -> None:
    answer, picked = chat(server, **extra)
    assert picked == 0
    if "response_format" in extra and answer["choices"][0]["finish_reason"] == "stop":
        json.loads(text(answer))
    if "logprobs" in extra:
        assert len(answer["choices"][0]["logprobs"]["content"]) == answer["usage"]["completion_tokens"]


def test_speculation_verifies_drafts_with_the_graphs_sampler(server_dir: Path) -> None:
    """A draft's tokens are verified with the chain in the graph too: the context takes 1 + the longest draft
    outputs a sequence (llama-server's sizing), and a request asking for longer drafts is held to it."""
    from tests.integration.test_speculative import PROMPT

    server = start(server_dir, ["-bs", "-v", "-np", "1", "-c", "4096", "--spec-type", "ngram-simple"])
    try:
        def complete(**extra: Any) -> dict[str, Any]:
            reply = requests.post(server.url("/completion"), timeout=300, json={
                "prompt": PROMPT, "n_predict": 64, "temperature": 0, "cache_prompt": False, **extra})
            assert reply.status_code == 200, reply.text[:300]
            body: dict[str, Any] = reply.json()
            return body

        before = server.log().count(PICKED)
        on = complete()
        assert server.log().count(PICKED) > before
        longer = complete(**{"speculative.n_max": 64})
        off = complete(backend_sampling=False)
        assert on["content"] == longer["content"] == off["content"]
        assert on["timings"]["draft_n_accepted"] > 16 and longer["timings"]["draft_n"] > 0
    finally:
        assert server.stop() == 0, server.log()
