"""llama-server's streaming fields on the real model: return_progress reports a long prompt in
the batches it is decoded in, timings_per_token puts the timings on every chunk, and sse_ping_interval
pings a stream that another prompt's decode holds up."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.conftest import Server, start

LONG = "The quick brown fox jumps over the lazy dog. " * 30


@pytest.fixture(scope="module")
def small_batches(server_dir: Path) -> Iterator[Server]:
    server = start(server_dir, ["-np", "1", "-c", "1024", "-b", "64", "-ub", "64"])
    yield server
    assert server.stop() == 0, server.log()


def stream(server: Server, body: dict[str, Any]) -> list[dict[str, Any]]:
    with requests.post(server.url("/completion"), json={"stream": True, **body}, stream=True, timeout=120) as reply:
        assert reply.status_code == 200
        return [json.loads(line[6:]) for line in reply.iter_lines(decode_unicode=True)
                if line.startswith("data: {")]


def test_progress_follows_the_prompt_through_its_batches(small_batches: Server) -> None:
    events = stream(small_batches, {"prompt": LONG, "n_predict": 4, "return_progress": True, "cache_prompt": False})
    progress = [event["prompt_progress"] for event in events if "prompt_progress" in event]
    total = progress[0]["total"]
    assert total > 300 and progress[0]["processed"] == 0
    processed = [step["processed"] for step in progress]
    assert processed == sorted(processed) and processed[-1] == total
    assert len(progress) >= total // 64  # one report a batch of 64
    assert all(step["time_ms"] >= 0 for step in progress) and progress[-1]["time_ms"] >= progress[0]["time_ms"]


def test_timings_per_token_counts_the_tokens_so_far(small_batches: Server) -> None:
    events = stream(small_batches, {"prompt": "Once upon a time", "n_predict": 8, "ignore_eos": True,
                                    "timings_per_token": True})
    counts = [event["timings"]["predicted_n"] for event in events if not event["stop"]]
    assert counts == sorted(counts) and counts[-1] == 8


def test_progress_events_carry_the_timings_with_timings_per_token(small_batches: Server) -> None:
    """As llama-server's: a progress event has ``timings`` when the request asks for them on every chunk."""
    plain = stream(small_batches, {"prompt": LONG, "n_predict": 2, "return_progress": True, "cache_prompt": False})
    assert not any("timings" in event for event in plain if "prompt_progress" in event)
    timed = stream(small_batches, {"prompt": LONG, "n_predict": 2, "return_progress": True, "cache_prompt": False,
                                   "timings_per_token": True})
    progress = [event for event in timed if "prompt_progress" in event]
    assert progress and all(event["timings"]["predicted_n"] == 0 for event in progress)
    assert all(event["timings"]["prompt_n"] == event["prompt_progress"]["total"] - event["prompt_progress"]["cache"]
               for event in progress)
    elapsed = [event["timings"]["prompt_ms"] for event in progress]
    assert elapsed == sorted(elapsed)


@pytest.fixture(scope="module")
def two_slots(server_dir: Path) -> Iterator[Server]:
    server = start(server_dir, ["-np", "2", "-c", "8192"])
    yield server
    assert server.stop() == 0, server.log()


@pytest.mark.parametrize(("path", "budget"), [("/completion", "n_predict"), ("/v1/completions", "max_tokens")])
def test_a_stream_stalled_by_another_prompt_is_pinged(two_slots: Server, path: str, budget: str) -> None:
    """sse_ping_interval 1: while another request's ~2,000-token prompt is decoded (one step of it, seconds on
    a CPU), a running stream gets no token; it gets an SSE comment instead, and its tokens go on after it."""
    stalling = threading.Thread(target=lambda: requests.post(two_slots.url("/completion"), json={
        "prompt": "The quick brown fox jumps over the lazy dog. " * 200, "n_predict": 1, "cache_prompt": False},
        timeout=300))
    lines: list[str] = []
    with requests.post(two_slots.url(path), stream=True, timeout=300, json={
            "prompt": "Once upon a time", budget: 400, "ignore_eos": True, "stream": True,
            "sse_ping_interval": 1}) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines(decode_unicode=True):
            if not line:
                continue
            lines.append(line)
            if len(lines) == 1:  # the stream has started: now the long prompt
                stalling.start()
            if ":" in lines and line.startswith("data: "):  # a token after the ping
                break
    stalling.join(300)
    assert lines[0].startswith("data: ") and ":" in lines, lines[:5]
    assert lines[-1].startswith("data: ")
    last = json.loads(lines[-1][6:])
    assert not (last["stop"] if path == "/completion" else last["choices"][0]["finish_reason"])  # it went on
