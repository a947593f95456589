"""Resumable stream sessions (app/protocol/stream_sessions.py): byte offsets, the kept tail, replacement,
lookup by id (and id::model), expiry; and the routes on the in-process app."""

from __future__ import annotations

import threading
import time

import pytest
from flask.testing import FlaskClient

from app.protocol.stream_sessions import MAX_SESSIONS, OffsetLost, StreamSession, StreamSessions, TooManySessions
from app.server.wiring import Application
from tests.inprocess import PROMPT


def never() -> bool:
    return False


def test_a_reader_gets_the_bytes_from_its_offset_and_follows_until_the_end() -> None:
    session = StreamSession("c")
    session.write(b"abc")
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend(session.read_from(1, never)))
    reader.start()
    time.sleep(0.05)
    session.write(b"def")
    session.finish()
    reader.join(5)
    assert b"".join(got) == b"bcdef"
    assert list(session.read_from(6, never)) == []


def test_only_the_last_bytes_are_kept() -> None:
    session = StreamSession("c", max_bytes=4)
    session.write(b"abcdef")
    session.finish()
    assert b"".join(session.read_from(2, never)) == b"cdef"
    with pytest.raises(OffsetLost):
        session.check_offset(1)
    assert session.info().total_bytes == 6


def test_a_new_stream_on_the_same_id_cancels_the_old_one_and_lookup_finds_variants() -> None:
    sessions = StreamSessions()
    first = sessions.create("conv")
    second = sessions.create("conv")
    assert first.is_cancelled() and not second.is_cancelled() and sessions.get("conv") is second
    sessions.create("conv::model-a")
    sessions.create("other")
    assert sorted(info.conversation_id for info in sessions.lookup(["conv"])) == ["conv", "conv::model-a"]
    sessions.evict("conv", cancel=True)
    assert second.is_cancelled() and sessions.get("conv") is None


def test_the_sessions_held_are_bounded() -> None:
    sessions = StreamSessions(max_sessions=2)
    first, second = sessions.create("a"), sessions.create("b")
    with pytest.raises(TooManySessions, match="2 resumable streams are running"):
        sessions.create("c")  # both live: nothing may be dropped
    assert sessions.create("a") is not first and first.is_cancelled()  # the same id replaces its own
    second.finish()
    third = sessions.create("c")  # the completed one makes room
    assert sessions.get("b") is None and sessions.get("c") is third


def test_completed_sessions_expire() -> None:
    sessions = StreamSessions(ttl_seconds=0)
    session = sessions.create("old")
    assert sessions.get("old") is session  # still running: kept
    session.finish()
    time.sleep(1.1)
    assert sessions.get("old") is None


def test_a_resumable_stream_replays_and_is_listed(client: FlaskClient) -> None:
    original = client.post("/completion", json={"prompt": PROMPT, "n_predict": 6, "stream": True},
                           headers={"X-Conversation-Id": "resume-me"}).get_data()
    replay = client.get("/v1/stream?conv_id=resume-me").get_data()
    assert replay == original and replay.count(b"data: ") >= 2
    assert client.get("/v1/stream?conv_id=resume-me&from=10").get_data() == original[10:]
    [info] = client.post("/v1/streams/lookup", json={"conversation_ids": ["resume-me"]}).get_json()
    assert info["is_done"] and info["total_bytes"] == len(original) and info["completed_at"] >= info["started_at"]
    assert client.delete("/v1/stream?conv_id=resume-me").status_code == 204
    gone = client.get("/v1/stream?conv_id=resume-me")
    assert gone.status_code == 404 and gone.get_json()["error"]["message"] == "Stream not found or expired"


def test_bad_resume_requests(client: FlaskClient) -> None:
    assert client.get("/v1/stream").status_code == 400
    client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "stream": True},
                headers={"X-Conversation-Id": "bad-offsets"})
    assert "Invalid 'from' offset" in client.get("/v1/stream?conv_id=bad-offsets&from=x").get_json()["error"]["message"]
    assert client.delete("/v1/stream").status_code == 400


def test_a_request_that_does_not_stream_leaves_no_session(client: FlaskClient) -> None:
    client.post("/completion", json={"prompt": PROMPT, "n_predict": 2}, headers={"X-Conversation-Id": "plain"})
    assert client.post("/v1/streams/lookup", json={"conversation_ids": ["plain"]}).get_json() == []


def test_a_resumable_stream_past_the_bound_is_a_503(application: Application, client: FlaskClient) -> None:
    live = [application.context.stream_sessions.create(f"held-{number}") for number in range(MAX_SESSIONS)]
    try:
        refused = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "stream": True},
                              headers={"X-Conversation-Id": "one-too-many"})
        assert refused.status_code == 503
        assert "resumable streams are running" in refused.get_json()["error"]["message"]
        plain = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "stream": True})
        assert plain.status_code == 200  # without the header it streams as ever
    finally:
        for session in live:
            session.finish()
