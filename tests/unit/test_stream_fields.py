"""llama-server's streaming fields: timings_per_token (timings on every chunk), return_progress
(prompt_progress events before the first token) and sse_ping_interval (SSE comments while a
stream is silent), on the in-process app (fake backend) and on the SSE writer itself."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.http.render import PING, sse_body
from app.protocol.api import IDLE, Heartbeat, SseEvent
from tests.fakes import FakeBackend
from tests.inprocess import JAPANESE, PROMPT, make_application


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


def test_an_idle_is_written_as_a_comment_and_beats_the_heartbeat() -> None:
    heartbeat = Heartbeat(60)
    before = heartbeat.due_at()
    time.sleep(0.01)
    written = list(sse_body(iter([SseEvent({"n": 1}), IDLE, SseEvent({"n": 2})]), heartbeat=heartbeat))
    assert written == ['data: {"n":1}\n\n', PING, 'data: {"n":2}\n\n']
    assert heartbeat.due_at() > before
    assert Heartbeat(0).due_at() == math.inf  # pings off


def test_an_error_in_a_stream_is_the_streams_error_event() -> None:
    def failing() -> Iterator[SseEvent]:
        yield SseEvent({"n": 1})
        raise ValueError("broken")

    written = list(sse_body(failing()))
    assert written[0] == 'data: {"n":1}\n\n' and '"error"' in written[-1] and "broken" in written[-1]


def test_closing_a_stream_closes_its_source() -> None:
    closed: list[bool] = []

    def endless() -> Iterator[SseEvent]:
        try:
            while True:
                yield SseEvent({})
        finally:
            closed.append(True)

    writer = sse_body(endless())
    next(writer)
    writer.close()
    assert closed == [True]


STREAMS = {  # every streaming route of the fake model's app, each for two tokens
    "/completion": {"prompt": PROMPT, "n_predict": 2},
    "/v1/completions": {"prompt": PROMPT, "max_tokens": 2},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    "/v1/responses": {"input": "Hi", "max_output_tokens": 2},
    "/v1/messages": {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    "/infill": {"input_prefix": "a", "input_suffix": "b", "n_predict": 2},
}


def test_every_streaming_route_pings_while_its_stream_is_silent() -> None:
    """--sse-ping-interval 1 and a decode step of 1.3 s: between a stream's first token and its second,
    each route writes an SSE comment (the engine's silence passes through every route's renderer)."""
    made: list[FakeBackend] = []
    application = make_application("-np", "8", "--sse-ping-interval", "1", reply="Hello there", made=made)
    try:
        made[0].decode_seconds = 1.3
        bodies: dict[str, str] = {}

        def call(path: str) -> None:
            bodies[path] = application.flask.test_client().post(
                path, json={**STREAMS[path], "stream": True}).get_data(as_text=True)

        threads = [threading.Thread(target=call, args=(path,)) for path in STREAMS]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        for path, raw in bodies.items():
            first_data, last_data = raw.index("data: "), raw.rindex("data: ")
            assert PING in raw[first_data:last_data], (path, raw)
            assert not raw.startswith(PING), path  # none before the answer starts
        assert set(bodies) == set(STREAMS)
    finally:
        application.shutdown()


def test_a_call_held_back_while_tokens_come_is_pinged() -> None:
    """Tokens keep coming but a chat writes nothing while they may be a tool call (held until whole): the
    silence is the writer's, so the stream is pinged all the same; without pings it is not."""
    call = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris, France, Europe"}}]'
    template = "{% if tools %}[tools]{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    made: list[FakeBackend] = []
    application = make_application("--jinja", "--chat-template", template + "{# [TOOL_CALLS] #}<assistant>",
                                   "--sse-ping-interval", "1", reply=call, made=made)
    try:
        made[0].decode_seconds = 0.03  # a token each 30 ms: about 2.5 s of a call
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}]
        for interval, pinged in ((1, True), (0, False)):
            raw = application.flask.test_client().post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "Weather?"}], "stream": True, "max_tokens": 200,
                "tools": tools, "sse_ping_interval": interval}).get_data(as_text=True)
            assert (PING in raw) is pinged, raw
            chunks = events(raw)
            assert [call["function"]["name"] for chunk in chunks if chunk["choices"]
                    for call in chunk["choices"][0]["delta"].get("tool_calls") or []] == ["get_weather"]
    finally:
        application.shutdown()


def test_responses_stream_events_carry_the_timings(client: FlaskClient) -> None:
    """llama-server's Responses stream: the final event has the timings; with timings_per_token
    every text delta has them too."""
    raw = client.post("/v1/responses", json={"input": PROMPT, "stream": True, "max_output_tokens": 6,
                                             "timings_per_token": True}).get_data(as_text=True)
    streamed = events(raw)
    deltas = [event for event in streamed if event["type"] == "response.output_text.delta"]
    assert deltas and all("timings" in event for event in deltas)
    assert streamed[-1]["type"] == "response.incomplete" and streamed[-1]["timings"]["predicted_n"] == 6
