"""Speculative decoding on the real model: n-gram drafts (--spec-type ngram-simple) and a draft model
(-md; the embedded model as its own draft). Greedy output with speculation equals greedy output
without it (a request's speculative.n_max 0) on the same server, the drafts show in the timings,
/slots and /metrics, and a draft model whose vocabulary differs is refused at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from app.model_files import embedded_model_path
from tests.integration.conftest import Server, launch, start
from tests.models import make_reranker

# An edit task: the answer repeats most of the text, which n-gram drafts copy.
TEXT = ("The lighthouse keeper climbed the spiral stairs every evening, lit the great lamp, and watched the ships "
        "pass the rocks until dawn. In the morning he wrote the weather in his book and slept until noon. ")
EDIT = [{"role": "user", "content": f"Repeat this text exactly, word for word:\n\n{TEXT}"}]


def chat(server: Server, **fields: Any) -> dict[str, Any]:
    reply = requests.post(server.url("/v1/chat/completions"), timeout=300, json={
        "messages": EDIT, "max_tokens": 64, "temperature": 0, **fields})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def counters(server: Server) -> dict[str, float]:
    text = requests.get(server.url("/metrics"), timeout=10).text
    return {sample.name + "".join(sample.labels.values()): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def check_same_greedy_output(server: Server) -> dict[str, Any]:
    plain = chat(server, **{"speculative.n_max": 0})
    assert "draft_n" not in plain["timings"]
    fast = chat(server)
    assert fast["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert fast["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"]
    timings = fast["timings"]
    assert timings["draft_n"] > 0 and 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    assert all(slot["speculative"] for slot in requests.get(server.url("/slots"), timeout=10).json())
    metrics = counters(server)
    assert metrics["llamacpp:spec_decode_num_draft_tokens_total"] == timings["draft_n"]
    assert metrics["llamacpp:spec_decode_num_accepted_tokens_total"] == timings["draft_n_accepted"]
    return fast


def test_ngram_speculation_keeps_the_greedy_output(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "2", "-c", "4096", "--metrics", "--spec-type", "ngram-simple",
                                "--spec-ngram-simple-size-n", "4", "--spec-ngram-simple-size-m", "16"])
    try:
        fast = check_same_greedy_output(server)
        assert fast["timings"]["draft_n_accepted"] > 0  # the answer copies the prompt's text
        completion = requests.post(server.url("/completion"), timeout=300, json={
            "prompt": f"Text: {TEXT}\nThe same text again: {TEXT[:40]}", "n_predict": 32, "temperature": 0,
            "speculative.n_max": 4}).json()
        assert completion["timings"]["draft_n"] > 0
    finally:
        assert server.stop() == 0, server.log()


def test_a_draft_model_keeps_the_greedy_output(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "2", "-c", "4096", "--metrics", "-md", str(embedded_model_path()),
                                "--spec-draft-n-max", "4"])
    try:
        fast = check_same_greedy_output(server)
        # the model drafting for itself: it is sure of most of its picks, and the target agrees
        assert fast["timings"]["draft_n_accepted"] > fast["timings"]["draft_n"] // 2
        assert "draft model loaded" in server.log()
    finally:
        assert server.stop() == 0, server.log()


def test_a_draft_model_of_another_vocabulary_is_refused(server_dir: Path, tmp_path: Path) -> None:
    other = make_reranker(tmp_path / "wordpiece.gguf")  # a BERT vocabulary, not SmolLM2's
    server = launch(server_dir, ["-np", "1", "-md", str(other)])
    try:
        assert server.process.wait(timeout=120) == 4
    finally:
        server.stop()
    assert "cannot draft for this model" in server.log()
