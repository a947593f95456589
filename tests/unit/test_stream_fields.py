"""llama-server's streaming fields: timings_per_token (timings on every chunk), return_progress
(prompt_progress events before the first token) and sse_ping_interval (SSE comments while a
stream is silent), on the in-process app (fake backend) and on the SSE writer itself."""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.http.render import PING, sse_body, with_pings
from app.protocol.api import SseEvent
from tests.inprocess import JAPANESE, PROMPT


def events(raw: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]


def test_timings_per_token_puts_the_timings_so_far_on_every_chunk(client: FlaskClient) -> None:
    raw = client.post("/completion", json={"prompt": PROMPT, "stream": True, "timings_per_token": True,
                                           "n_predict": 6}).get_data(as_text=True)
    chunks = [event for event in events(raw) if not event["stop"]]
    assert chunks and all("timings" in chunk for chunk in chunks)
    assert [chunk["timings"]["predicted_n"] for chunk in chunks] == sorted(c["timings"]["predicted_n"] for c in chunks)
    assert chunks[-1]["timings"]["predicted_n"] == 6 and chunks[0]["timings"]["prompt_n"] == len(PROMPT)
    plain = client.post("/completion", json={"prompt": PROMPT, "stream": True, "n_predict": 6}).get_data(as_text=True)
    assert not any("timings" in event for event in events(plain) if not event["stop"])  # only the final one


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_timings_per_token_in_the_openai_dialects(client: FlaskClient, path: str) -> None:
    body: dict[str, Any] = {"stream": True, "timings_per_token": True, "max_tokens": 6}
    body |= {"prompt": PROMPT} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "Hi"}]}
    chunks = [event for event in events(client.post(path, json=body).get_data(as_text=True)) if event["choices"]]
    texts = [chunk for chunk in chunks if (chunk["choices"][0].get("text") or
                                           chunk["choices"][0].get("delta", {}).get("content"))]
    assert texts and all("timings" in chunk for chunk in texts)


def test_return_progress_reports_the_prompt_before_the_first_token(client: FlaskClient) -> None:
    prompt = "A prompt of its own>"
    raw = client.post("/completion", json={"prompt": prompt, "stream": True, "return_progress": True,
                                           "n_predict": 4, "cache_prompt": False}).get_data(as_text=True)
    streamed = events(raw)
    progress = [event["prompt_progress"] for event in streamed if "prompt_progress" in event]
    assert progress[0] == {"total": len(prompt), "cache": 0, "processed": 0, "time_ms": progress[0]["time_ms"]}
    assert progress[-1]["processed"] == progress[-1]["total"] == len(prompt)
    first_text = next(index for index, event in enumerate(streamed) if event.get("content"))
    assert all("prompt_progress" in event for event in streamed[:first_text])
    assert "".join(event["content"] for event in streamed) == JAPANESE[:1]  # 4 tokens: one 3-byte character


def test_return_progress_in_chat_opens_the_message_with_the_progress(client: FlaskClient) -> None:
    raw = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "stream": True,
                                                    "return_progress": True, "max_tokens": 3}).get_data(as_text=True)
    progress = [event for event in events(raw) if "prompt_progress" in event]
    assert progress and all(event["choices"][0]["delta"] == {"role": "assistant", "content": None}
                            for event in progress)
    assert progress[-1]["prompt_progress"]["processed"] == progress[-1]["prompt_progress"]["total"]


def test_without_streaming_return_progress_changes_nothing(client: FlaskClient) -> None:
    body = client.post("/completion", json={"prompt": PROMPT, "return_progress": True, "n_predict": 3}).json
    assert body is not None and "prompt_progress" not in body and body["tokens_predicted"] == 3


def slow(gap: float) -> Iterator[SseEvent]:
    yield SseEvent({"n": 1})
    time.sleep(gap)
    yield SseEvent({"n": 2})


def test_a_silent_stream_is_pinged_and_keeps_its_events() -> None:
    written = list(sse_body(slow(0.5), ping_seconds=0.1))
    assert written[0] == 'data: {"n":1}\n\n' and written[-1] == 'data: {"n":2}\n\n'
    assert PING in written[1:-1] and set(written[1:-1]) == {PING}
    assert PING not in sse_body(slow(0.3), ping_seconds=0)  # no pings when off


def test_an_error_in_a_pinged_stream_is_the_streams_error_event() -> None:
    def failing() -> Iterator[SseEvent]:
        yield SseEvent({"n": 1})
        raise ValueError("broken")

    written = list(sse_body(failing(), ping_seconds=5))
    assert written[0] == 'data: {"n":1}\n\n' and '"error"' in written[-1] and "broken" in written[-1]


def test_closing_a_pinged_stream_closes_its_source() -> None:
    closed: list[bool] = []

    def endless() -> Iterator[SseEvent]:
        try:
            while True:
                yield SseEvent({})
                time.sleep(0.01)
        finally:
            closed.append(True)

    reader = with_pings(endless(), 1.0)
    assert isinstance(reader, Generator)
    next(reader)
    reader.close()
    deadline = time.monotonic() + 10
    while not closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert closed == [True]


def test_responses_stream_events_carry_the_timings(client: FlaskClient) -> None:
    """llama-server's Responses stream: the final event has the timings; with timings_per_token
    every text delta has them too."""
    raw = client.post("/v1/responses", json={"input": PROMPT, "stream": True, "max_output_tokens": 6,
                                             "timings_per_token": True}).get_data(as_text=True)
    streamed = events(raw)
    deltas = [event for event in streamed if event["type"] == "response.output_text.delta"]
    assert deltas and all("timings" in event for event in deltas)
    assert streamed[-1]["type"] == "response.incomplete" and streamed[-1]["timings"]["predicted_n"] == 6
