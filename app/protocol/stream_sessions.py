"""Resumable streams, as llama-server keeps them: a streaming request that carries
``X-Conversation-Id`` writes its server-sent events into a session as well as to its client, and
keeps generating when the client goes away; ``GET /v1/stream?conv_id=&from=`` replays the session
from a byte offset and follows it live, ``POST /v1/streams/lookup`` lists sessions by id, and
``DELETE /v1/stream`` cancels one. One live session per conversation id; a session keeps its last
4 MiB, and is dropped 300 s after it completed.

Beyond llama-server: a session belongs to the client that started it. Its answer carries the
session's token (``X-Stream-Token``); reading the session, cancelling it or starting another stream
under its id while it is live needs that token, unless the server has API keys (then the key that
every request carries is enough).

The bytes are the SSE text the client got, so a replay is the same stream. No web framework here:
the HTTP layer tees a stream into a session (app/http/flask_app.py), the handlers read them."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

MAX_BYTES = 4 * 1024 * 1024
TTL_SECONDS = 300
MAX_SESSIONS = 64  # held at once (each keeps up to MAX_BYTES): 256 MiB at most
WAKE_SECONDS = 0.2  # a waiting reader checks its client this often
HEADER = "X-Conversation-Id"
TOKEN_HEADER = "X-Stream-Token"


class OffsetLost(Exception):
    """The bytes from that offset were dropped (the session keeps its last MAX_BYTES)."""


class TooManySessions(Exception):
    """Every place for a session holds a live stream."""


class NotTheOwner(Exception):
    """A live session's id was given without its token."""


@dataclass(frozen=True)
class SessionInfo:
    conversation_id: str
    is_done: bool
    total_bytes: int
    started_at: int
    completed_at: int  # 0 while it runs


class StreamSession:
    def __init__(self, conversation_id: str, max_bytes: int = MAX_BYTES) -> None:
        self.conversation_id = conversation_id
        self.token = secrets.token_urlsafe(18)  # the starter's: read, cancel or replace it while live
        self.started_at = int(time.time())
        self._max = max_bytes
        self._buffer = bytearray()
        self._dropped = 0  # bytes gone from the front
        self._completed_at = 0
        self._cancelled = threading.Event()
        self._changed = threading.Condition()

    # ---- the producer ----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        with self._changed:
            if self._completed_at:
                return
            self._buffer += data
            excess = len(self._buffer) - self._max
            if excess > 0:
                del self._buffer[:excess]
                self._dropped += excess
            self._changed.notify_all()

    def finish(self) -> None:
        with self._changed:
            if not self._completed_at:
                self._completed_at = int(time.time())
            self._changed.notify_all()

    def cancel(self) -> None:
        """The producer stops at its next check (``is_cancelled``); readers end."""
        self._cancelled.set()
        self.finish()

    def is_cancelled(self) -> bool:
        return self._cancelled.is_set()

    # ---- readers -----------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._completed_at != 0

    def info(self) -> SessionInfo:
        with self._changed:
            return SessionInfo(self.conversation_id, self.done, self._dropped + len(self._buffer), self.started_at,
                               self._completed_at)

    def owned_by(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.token.encode())

    def check_offset(self, offset: int) -> None:
        with self._changed:
            if offset < self._dropped:
                raise OffsetLost(offset)

    def read_from(self, offset: int, client_gone: Callable[[], bool]) -> Iterator[bytes]:
        """The bytes from ``offset`` on, as they come, until the session completes (or the reader's
        client goes away); OffsetLost if the reader falls behind what is kept."""
        while True:
            with self._changed:
                if offset < self._dropped:
                    raise OffsetLost(offset)
                end = self._dropped + len(self._buffer)
                if offset >= end:
                    if self.done:
                        return
                    self._changed.wait(WAKE_SECONDS)
                    chunk = b""
                else:
                    chunk = bytes(self._buffer[offset - self._dropped:])
            if chunk:
                offset += len(chunk)
                yield chunk
            elif client_gone():
                return


class StreamSessions:
    """The live sessions by conversation id (one each); completed ones expire after TTL_SECONDS."""

    def __init__(self, ttl_seconds: int = TTL_SECONDS, max_bytes: int = MAX_BYTES,
                 max_sessions: int = MAX_SESSIONS, keyed: bool = False) -> None:
        """``keyed``: the server checks API keys, so every caller carries one and may touch any session."""
        self._keyed = keyed
        self._ttl = ttl_seconds
        self._max = max_bytes
        self._max_sessions = max_sessions
        self._sessions: dict[str, StreamSession] = {}
        self._lock = threading.Lock()

    def _expire(self) -> None:
        cutoff = time.time() - self._ttl
        for key, session in list(self._sessions.items()):
            if session.done and session.info().completed_at <= cutoff:
                del self._sessions[key]

    def create(self, conversation_id: str, token: str | None = None) -> StreamSession:
        """A new session for the id; a previous one is cancelled (its stream stops): while it is live,
        only with its ``token`` or on a keyed server (NotTheOwner otherwise). With every place taken,
        the oldest completed session makes room; TooManySessions if all are live."""
        fresh = StreamSession(conversation_id, self._max)
        with self._lock:
            self._expire()
            previous = self._sessions.get(conversation_id)
            if previous is not None and not previous.done and not self._keyed and not previous.owned_by(token):
                raise NotTheOwner(f"a live stream has the {HEADER} {conversation_id!r}; give its {TOKEN_HEADER} "
                                  "to replace it, or use another id")
            if previous is None and len(self._sessions) >= self._max_sessions:
                completed = [key for key, session in self._sessions.items() if session.done]
                if not completed:
                    raise TooManySessions(f"{len(self._sessions)} resumable streams are running (the most this "
                                          "server keeps); retry later, or stream without X-Conversation-Id")
                oldest = min(completed, key=lambda key: self._sessions[key].info().completed_at)
                del self._sessions[oldest]
            self._sessions[conversation_id] = fresh
        if previous is not None:
            previous.cancel()
        return fresh

    def owned(self, conversation_id: str, token: str | None) -> StreamSession | None:
        """The session of the id for the client that started it (its ``token``), or any client of a
        keyed server; NotTheOwner for anyone else, None where there is no session."""
        session = self.get(conversation_id)
        if session is not None and not self._keyed and not session.owned_by(token):
            raise NotTheOwner(f"this stream belongs to the client that started it: give its {TOKEN_HEADER}")
        return session

    def get(self, conversation_id: str) -> StreamSession | None:
        with self._lock:
            self._expire()
            return self._sessions.get(conversation_id)

    def lookup(self, conversation_ids: list[str]) -> list[SessionInfo]:
        """Sessions whose id is one of these, or one of these followed by ``::`` (a model variant)."""
        with self._lock:
            self._expire()
            sessions = list(self._sessions.values())
        found = []
        for wanted in conversation_ids:
            found += [session.info() for session in sessions if session.conversation_id == wanted
                      or session.conversation_id.startswith(wanted + "::")]
        return found

    def evict(self, conversation_id: str, cancel: bool = False) -> None:
        with self._lock:
            session = self._sessions.pop(conversation_id, None)
        if session is not None:
            if cancel:
                session.cancel()
            else:
                session.finish()
