"""Resumable stream sessions (app/protocol/stream_sessions.py): byte offsets, the kept tail, replacement,
lookup by id (and id::model), expiry; and the routes on the in-process app."""

from __future__ import annotations

import threading
import time

import pytest
from flask.testing import FlaskClient

from app.protocol.stream_sessions import (
    MAX_SESSIONS,
    NotTheOwner,
    OffsetLost,
    StreamSession,
    StreamSessions,
    TooManySessions,
)
from tests.inprocess import PROMPT, make_application


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
    with pytest.raises(NotTheOwner):
        sessions.create("conv")  # a live stream is replaced only by its starter
    with pytest.raises(NotTheOwner):
        sessions.create("conv", "a guess")
    assert not first.is_cancelled()
    second = sessions.create("conv", first.token)
    assert first.is_cancelled() and not second.is_cancelled() and sessions.get("conv") is second
    keyed = StreamSessions(keyed=True)  # every caller of a keyed server carries a key
    live = keyed.create("conv")
    assert keyed.create("conv") is not live and live.is_cancelled()
    assert keyed.owned("conv", None) is not None
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
    assert sessions.create("a", first.token) is not first and first.is_cancelled()  # the same id replaces its own
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
    started = client.post("/completion", json={"prompt": PROMPT, "n_predict": 6, "stream": True},
                          headers={"X-Conversation-Id": "resume-me"})
    original, mine = started.get_data(), {"X-Stream-Token": started.headers["X-Stream-Token"]}
    replay = client.get("/v1/stream?conv_id=resume-me", headers=mine).get_data()
    assert replay == original and replay.count(b"data: ") >= 2
    assert client.get("/v1/stream?conv_id=resume-me&from=10", headers=mine).get_data() == original[10:]
    [info] = client.post("/v1/streams/lookup", json={"conversation_ids": ["resume-me"]}).get_json()
    assert info["is_done"] and info["total_bytes"] == len(original) and info["completed_at"] >= info["started_at"]
    assert client.delete("/v1/stream?conv_id=resume-me", headers=mine).status_code == 204
    gone = client.get("/v1/stream?conv_id=resume-me", headers=mine)
    assert gone.status_code == 404 and gone.get_json()["error"]["message"] == "Stream not found or expired"


def test_only_the_starter_reads_or_cancels_a_stream(client: FlaskClient) -> None:
    """Another client that knows (or guesses) the conversation id gets a 403; so does one that tries to
    replace the live stream, or to replay it under the same header (which once cancelled it)."""
    started = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "stream": True},
                          headers={"X-Conversation-Id": "mine"})
    token = started.headers["X-Stream-Token"]
    for stranger in ({}, {"X-Stream-Token": "guessed"}):
        for answer in (client.get("/v1/stream?conv_id=mine", headers=stranger),
                       client.delete("/v1/stream?conv_id=mine", headers=stranger)):
            assert answer.status_code == 403 and answer.get_json()["error"]["type"] == "permission_error"
    replay = client.get("/v1/stream?conv_id=mine", headers={"X-Conversation-Id": "mine", "X-Stream-Token": token})
    assert replay.get_data() == started.get_data()  # the replay's own header starts nothing, cancels nothing
    assert client.get(f"/v1/stream?conv_id=mine&token={token}").get_data() == started.get_data()
    assert client.delete("/v1/stream?conv_id=mine", headers={"X-Stream-Token": token}).status_code == 204


def test_bad_resume_requests(client: FlaskClient) -> None:
    assert client.get("/v1/stream").status_code == 400
    started = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "stream": True},
                          headers={"X-Conversation-Id": "bad-offsets"})
    mine = {"X-Stream-Token": started.headers["X-Stream-Token"]}
    answer = client.get("/v1/stream?conv_id=bad-offsets&from=x", headers=mine)
    assert "Invalid 'from' offset" in answer.get_json()["error"]["message"]
    assert client.delete("/v1/stream").status_code == 400


def test_a_request_that_does_not_stream_leaves_no_session(client: FlaskClient) -> None:
    client.post("/completion", json={"prompt": PROMPT, "n_predict": 2}, headers={"X-Conversation-Id": "plain"})
    assert client.post("/v1/streams/lookup", json={"conversation_ids": ["plain"]}).get_json() == []


def test_a_resumable_stream_past_the_bound_is_a_503() -> None:
    application = make_application()  # a server of its own: the earlier tests' streams may still be live
    client = application.flask.test_client()
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
        application.shutdown()


def test_on_a_server_with_api_keys_the_key_is_enough() -> None:
    """Every request to a keyed server carries a key: any key holder reads or stops a stream, as in
    llama-server (whose web UI stops a stream by its conversation id)."""
    built = make_application("--api-key", "sesame")
    try:
        client = built.flask.test_client()
        keyed = {"Authorization": "Bearer sesame"}
        started = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "stream": True},
                              headers={**keyed, "X-Conversation-Id": "shared"})
        assert client.get("/v1/stream?conv_id=shared", headers=keyed).get_data() == started.get_data()
        assert client.get("/v1/stream?conv_id=shared").status_code == 401  # no key: the middleware refuses
        assert client.delete("/v1/stream?conv_id=shared", headers=keyed).status_code == 204
    finally:
        built.shutdown()
