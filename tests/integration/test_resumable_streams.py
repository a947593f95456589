"""Resumable streams on a real server (llama-server's X-Conversation-Id): a client that goes away
mid-stream does not stop the generation; the stream is replayed from any offset, whole, by
GET /v1/stream; DELETE /v1/stream stops a running one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import Server, start

BODY = {"messages": [{"role": "user", "content": "Write a long story about the sea."}], "max_tokens": 120,
        "ignore_eos": True, "stream": True}


@pytest.fixture(scope="module")
def server(server_dir: Path) -> Iterator[Server]:
    running = start(server_dir, ["-np", "2", "-c", "2048"])
    yield running
    assert running.stop() == 0, running.log()


def lookup(server: Server, conversation: str) -> dict[str, object]:
    [info] = requests.post(server.url("/v1/streams/lookup"), json={"conversation_ids": [conversation]},
                           timeout=10).json()
    return dict(info)


def wait_done(server: Server, conversation: str) -> dict[str, object]:
    deadline = time.monotonic() + 120
    while not (info := lookup(server, conversation))["is_done"]:
        assert time.monotonic() < deadline, info
        time.sleep(0.2)
    return info


def test_a_stream_goes_on_without_its_client_and_replays_whole(server: Server) -> None:
    with requests.post(server.url("/v1/chat/completions"), json=BODY, stream=True, timeout=120,
                       headers={"X-Conversation-Id": "walked-away"}) as first:
        head = next(first.iter_content(chunk_size=None))  # the first events, then the client leaves
        mine = {"X-Stream-Token": first.headers["X-Stream-Token"]}  # the starter's, to come back with
    info = wait_done(server, "walked-away")
    stranger = requests.get(server.url("/v1/stream"), params={"conv_id": "walked-away"}, timeout=60)
    assert stranger.status_code == 403 and stranger.json()["error"]["type"] == "permission_error"
    replay = requests.get(server.url("/v1/stream"), params={"conv_id": "walked-away"}, headers=mine, timeout=60).content
    assert replay.startswith(head) and len(replay) == info["total_bytes"]
    assert replay.rstrip().endswith(b"data: [DONE]")
    usage_chunks = [line for line in replay.split(b"\n") if b'"finish_reason":"length"' in line]
    assert usage_chunks  # it generated all of its tokens, with nobody reading
    tail = requests.get(server.url("/v1/stream"), params={"conv_id": "walked-away", "from": str(len(head))},
                        headers=mine, timeout=60).content
    assert head + tail == replay


def test_delete_stops_a_running_stream(server: Server) -> None:
    long = {**BODY, "max_tokens": 1500}
    with requests.post(server.url("/v1/chat/completions"), json=long, stream=True, timeout=120,
                       headers={"X-Conversation-Id": "stop-me"}) as running:
        next(running.iter_content(chunk_size=None))
        stop = {"conv_id": "stop-me", "token": running.headers["X-Stream-Token"]}
        assert requests.delete(server.url("/v1/stream"), params={"conv_id": "stop-me"}, timeout=10).status_code == 403
        assert requests.delete(server.url("/v1/stream"), params=stop, timeout=10).status_code == 204
        rest = b"".join(running.iter_content(chunk_size=None))  # the stream ends soon after
    assert rest.count(b"data: ") < 1500
    assert requests.post(server.url("/v1/streams/lookup"), json={"conversation_ids": ["stop-me"]},
                         timeout=10).json() == []
    slots = server.wait_slots_idle()
    assert all(not slot["is_processing"] for slot in slots)
