"""Context checkpoints on a real sliding-window model (the embedded SmolLM2 rewritten as llama.cpp's granite_swa,
a 64-token window on three layers in four: tests/models.py). llama.cpp keeps a sequence's window cells for its
last positions only, so once a slot has generated well past its prompt, a new prompt that shares that prompt
cannot be served from the cells: it is decoded from the checkpoint taken near the old prompt's end (most of
it kept), or whole with --ctx-checkpoints 0, never from cells with holes. Either way its first token's
log-probability is the one a prompt decoded afresh gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import Server, start
from tests.models import make_swa_model

STORY = " ".join(f"The {animal} walked to market number {n} and bought {n + 3} apples." for n, animal in
                 enumerate(["fox", "dog", "cat", "cow", "owl", "bee", "elk", "yak", "ant", "bat"] * 4))
FLAGS = ["-np", "1", "-c", "4096", "-ub", "64", "-b", "256", "--cache-ram", "0"]
CLOSE = 0.05  # nats: a prompt decoded in other chunks gives logits a little apart, never further


@pytest.fixture(scope="module")
def swa_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_swa_model(tmp_path_factory.mktemp("swa") / "smollm2-swa.gguf", embedded_model_path(), window=64,
                          pattern=4)


def complete(server: Server, prompt: list[int], n_predict: int, cache: bool = True) -> dict[str, Any]:
    reply = requests.post(server.url("/completion"), timeout=300, json={
        "prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True, "n_probs": 1,
        "cache_prompt": cache})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def first_logprob(body: dict[str, Any]) -> tuple[int, float]:
    step = body["completion_probabilities"][0]
    return step["id"], step["logprob"]


def conversation(server: Server) -> tuple[dict[str, Any], dict[str, Any]]:
    """A 400-token prompt answered at length (the slot moves 300 positions on), then the same prompt with more
    after it; and that second prompt decoded afresh."""
    tokens = requests.post(server.url("/tokenize"), json={"content": STORY}, timeout=30).json()["tokens"]
    assert len(tokens) > 420
    first, more = tokens[:400], tokens[400:420]
    complete(server, first, 300)
    again = complete(server, first + more, 4)
    fresh = complete(server, first + more, 4, cache=False)
    return again, fresh


def test_a_checkpoint_serves_the_shared_prompt_once_the_window_moved_on(swa_model: Path, server_dir: Path) -> None:
    server = start(server_dir, ["--model", str(swa_model), *FLAGS])
    try:
        again, fresh = conversation(server)
        # restored from the checkpoint 4 tokens before the old prompt's end: all but those and the new ones kept
        assert again["timings"]["cache_n"] == 395 and again["timings"]["prompt_n"] == 25
        assert fresh["timings"]["cache_n"] == 0
        (token, logprob), (token_fresh, logprob_fresh) = first_logprob(again), first_logprob(fresh)
        assert token == token_fresh and abs(logprob - logprob_fresh) < CLOSE, (logprob, logprob_fresh)
    finally:
        assert server.stop() == 0, server.log()


def test_without_checkpoints_the_shared_prompt_is_decoded_whole(swa_model: Path, server_dir: Path) -> None:
    server = start(server_dir, ["--model", str(swa_model), *FLAGS, "--ctx-checkpoints", "0"])
    try:
        again, fresh = conversation(server)
        assert again["timings"]["cache_n"] == 0 and again["timings"]["prompt_n"] == 420
        (token, logprob), (token_fresh, logprob_fresh) = first_logprob(again), first_logprob(fresh)
        assert token == token_fresh and abs(logprob - logprob_fresh) < CLOSE, (logprob, logprob_fresh)
    finally:
        assert server.stop() == 0, server.log()
