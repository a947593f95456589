"""Concurrent requests are decoded together (proved from the engine's metrics), batched greedy
output equals solo output, and a client that disconnects mid-stream frees its slot."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import Server, start


@pytest.fixture(scope="module")
def batching_server(server_dir: Path) -> Iterator[Server]:
    server = start(server_dir, ["-np", "8", "-c", "4096", "--metrics"])
    yield server
    assert server.stop() == 0, server.log()


def chat(server: Server, question: str) -> dict[str, object]:
    body = {"messages": [{"role": "user", "content": question}], "max_tokens": 48, "temperature": 0,
            "ignore_eos": True}
    response = requests.post(server.url("/v1/chat/completions"), json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_eight_concurrent_chats_share_decode_steps(batching_server: Server) -> None:
    questions = [f"Tell me a fact about the number {n}." for n in range(8)]
    solo = [chat(batching_server, q)["choices"][0]["message"]["content"] for q in questions]  # type: ignore[index]
    assert batching_server.metric("llamacpp:n_sequences_per_decode_max") == 1
    decodes_before = batching_server.metric("llamacpp:n_decode_total")
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda q: chat(batching_server, q), questions))
    together = [a["choices"][0]["message"]["content"] for a in answers]  # type: ignore[index]
    assert all(a["usage"]["completion_tokens"] == 48 for a in answers)  # type: ignore[index]
    assert batching_server.metric("llamacpp:n_sequences_per_decode_max") == 8
    decodes = batching_server.metric("llamacpp:n_decode_total") - decodes_before
    assert decodes < 8 * 48  # serialised generation would need one decode per token per request
    assert together == solo


def test_a_client_that_disconnects_mid_stream_frees_its_slot(batching_server: Server) -> None:
    body = {"prompt": "Write a very long story.", "n_predict": 2000, "ignore_eos": True, "stream": True}
    decodes_before = batching_server.metric("llamacpp:n_decode_total")
    response = requests.post(batching_server.url("/completion"), json=body, stream=True, timeout=60)
    lines = response.iter_lines()
    received = 0
    for line in lines:
        if line.startswith(b"data: "):
            received += 1
            if received == 3:
                break
    busy = requests.get(batching_server.url("/slots"), timeout=10).json()
    assert any(slot["is_processing"] for slot in busy)
    response.close()
    batching_server.wait_slots_idle()
    decodes = batching_server.metric("llamacpp:n_decode_total") - decodes_before
    assert 3 <= decodes < 2000  # the generation ended when its client went, long before its budget


def test_a_non_streaming_client_that_disconnects_frees_its_slot(batching_server: Server) -> None:
    body = {"prompt": "Write a very long story.", "n_predict": 3000, "ignore_eos": True}
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.post(batching_server.url("/completion"), json=body, timeout=1.5)
    batching_server.wait_slots_idle()
