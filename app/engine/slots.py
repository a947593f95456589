"""A slot: one sequence of the llama context, what its KV cells hold, and the job it runs."""

from __future__ import annotations

import enum
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from app.engine.backend import BatchEntry, BatchMedia, BatchToken, Sampler
from app.engine.checkpoints import SlotCheckpoints
from app.engine.errors import EngineError
from app.engine.generation import Generation
from app.engine.reasoning_budget import BudgetGate
from app.engine.types import EmbeddingResult, GenerationRequest, JobEvent, MediaChunk, SlotView, Timings, TokenChunk

_job_ids = count()

EventSink = queue.SimpleQueue[tuple[int, Any]]


class Job:
    """A generation request in flight. The engine emits its events into ``sink``, tagged with
    ``index``, so that several jobs (several prompts, n > 1) can share one queue."""

    def __init__(self, request: GenerationRequest, sink: EventSink | None = None, index: int = 0) -> None:
        self.id = next(_job_ids)
        self.index = index
        self.request = request
        self.sink: EventSink = sink if sink is not None else queue.SimpleQueue()
        self._cancelled = threading.Event()
        self.followers: list[Job] = []
        self.on_finish: Callable[[], None] | None = None
        self._finished = False
        self.first_chunk_out = False  # a token's chunk has been emitted (app/engine/first_chunks.py)
        self._reader_idle = threading.Event()  # its reader has taken every event so far
        self._reader_idle.set()

    @property
    def family(self) -> list[Job]:
        """This job and its followers (the other completions of the same prompt, for n > 1)."""
        return [self, *self.followers]

    def emit(self, event: JobEvent | EngineError) -> None:
        self.sink.put((self.index, event))
        if not self._finished and not isinstance(event, TokenChunk):
            self._finished = True
            if self.on_finish is not None:
                self.on_finish()

    @property
    def finished(self) -> bool:
        """Whether its last event (completion or error) has been emitted."""
        return self._finished

    def reader_busy(self) -> None:
        """The engine is about to emit an event its reader is to take before the next decode."""
        self._reader_idle.clear()

    def reader_caught_up(self) -> None:
        """Its reader has taken every event emitted so far (and handed them on). Called for every event
        a reader waits for: setting the flag takes a lock, reading it does not."""
        if not self._reader_idle.is_set():
            self._reader_idle.set()

    def wait_for_reader(self, seconds: float) -> None:
        self._reader_idle.wait(seconds)

    def cancel(self) -> None:
        """Ask the engine to stop this job (and its followers); slots are free after the next step."""
        self._cancelled.set()
        for follower in self.followers:
            follower.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()


class EmbedJob:
    """Token inputs to embed; the outcome is an ``EmbeddingResult`` or the engine error."""

    def __init__(self, inputs: tuple[tuple[int, ...], ...]) -> None:
        self.inputs = inputs
        self.outcome: Future[EmbeddingResult] = Future()
        self.results: list[list[list[float]]] = [[] for _ in inputs]
        self.done = 0  # inputs embedded so far (in order)


class ControlJob:
    """Something to do on the engine thread between steps (slot files, ...); its outcome is the
    future's result or exception."""

    def __init__(self, action: Callable[[Any], Any]) -> None:
        self.action = action
        self.outcome: Future[Any] = Future()


class SlotState(enum.Enum):
    IDLE = "idle"
    PREFILL = "prefill"
    FOLLOW = "follow"  # waits for its leader's prompt, then copies the leader's KV cells
    GENERATE = "generate"


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    size = min(len(a), len(b))
    for index in range(size):
        if a[index] != b[index]:
            return index
    return size


def reusable_prefix(cells: Sequence[int], prompt: Sequence[int], media: Sequence[MediaChunk] = ()) -> int:
    """How much of ``prompt`` cells holding ``cells`` can keep: the common prefix, less one token
    (at least one prompt token is always decoded again, for its logits), and a media chunk of the
    prompt whole or not at all."""
    length = min(common_prefix_length(cells, prompt), len(prompt) - 1)
    for chunk in media:
        if chunk.start < length < chunk.start + chunk.n_tokens:
            return chunk.start
    return length


@dataclass
class Slot:
    """Engine-thread state of one sequence. ``cached`` always equals the tokens in its KV cells."""

    id: int
    cached: list[int] = field(default_factory=list)
    state: SlotState = SlotState.IDLE
    job: Job | None = None
    last_used: float = 0.0
    media: list[MediaChunk] = field(default_factory=list)  # the media of the prompt whose rows are cached
    # The cells as they are now were offered to the prompt cache (--cache-idle-slots): not again
    # until they change (a job starts here, a slot file is restored).
    offered: bool = False
    # Per-job state, reset by ``start``.
    pending: list[int] = field(default_factory=list)
    next_token: int = -1
    sampler: Sampler | None = None
    generation: Generation | None = None  # the text side; kept after the job for /slots
    reasoning: BudgetGate | None = None  # the request's reasoning budget, as it is spent
    leader: Slot | None = None
    n_prompt: int = 0
    cache_n: int = 0
    shifted: bool = False  # a context shift dropped some of this job's cells
    draft: list[int] = field(default_factory=list)  # the draft tokens this step verifies (in ``cached`` until then)
    draft_n: int = 0  # draft tokens this job has verified
    draft_accepted: int = 0  # ... and kept
    synthetic_rng: random.Random | None = None  # --spec-synth-*: this job's draws (None: drafts verified as usual)
    checkpoints: SlotCheckpoints = field(default_factory=SlotCheckpoints)  # of its cells' window (checkpoints.py)
    checkpoint_stops: list[int] = field(default_factory=list)  # where this job's prefill pauses to take one
    t_start: float = 0.0
    t_prompt_done: float = 0.0
    t_last: float = 0.0
    # Kept after the job for /slots.
    last_task: int | None = None
    last_request: GenerationRequest | None = None
    last_prompt_n: int = 0

    @property
    def busy(self) -> bool:
        return self.state is not SlotState.IDLE

    def reusable_prefix(self, prompt: Sequence[int], media: Sequence[MediaChunk] = ()) -> int:
        """Prompt tokens already in the KV cells (see :func:`reusable_prefix`)."""
        return reusable_prefix(self.cached, prompt, media)

    def position(self, index: int) -> int:
        """The position of the token at ``index`` of ``cached``: its index, less what M-RoPE media
        before it saved (a chunk may take fewer positions than rows)."""
        shift = 0
        for chunk in self.media:
            if chunk.start + chunk.n_tokens <= index:
                shift += chunk.n_pos - chunk.n_tokens
        return index + shift

    def _media_from(self, index: int) -> tuple[MediaChunk | None, int]:
        """The media chunk holding prompt index ``index`` (or None), and where the next chunk starts."""
        following = len(self.cached) + len(self.pending)
        for chunk in self.media:
            if chunk.start <= index < chunk.start + chunk.n_tokens:
                return chunk, index
            if chunk.start > index:
                return None, min(following, chunk.start)
        return None, following

    def next_whole_media(self, whole: Callable[[MediaChunk], bool]) -> MediaChunk | None:
        """The media chunk the prefill reaches next, if it must be decoded whole and alone."""
        chunk, _ = self._media_from(len(self.cached))
        return chunk if chunk is not None and self.pending and whole(chunk) else None

    def take_prefill(self, room: int, whole: Callable[[MediaChunk], bool]) -> list[BatchEntry]:
        """Up to ``room`` prompt tokens and media rows for the next decode (moved from ``pending`` to
        ``cached``). Media rows come only before this step's tokens (a step decodes its media rows
        first, then its tokens); it stops before a chunk that must be decoded alone."""
        entries: list[BatchEntry] = []
        taken = 0
        while self.pending and taken < room:
            index = len(self.cached)
            chunk, end = self._media_from(index)
            if chunk is None:
                count = min(room - taken, end - index)
                for token in self.pending[:count]:
                    entries.append(BatchToken(token, self.position(len(self.cached)), self.id, False))
                    self.cached.append(token)
            else:
                if whole(chunk) or any(isinstance(entry, BatchToken) for entry in entries):
                    break
                count = min(room - taken, chunk.start + chunk.n_tokens - index)
                entries.append(BatchMedia(chunk, index - chunk.start, count, self.position(chunk.start), self.id,
                                          False))
                self.cached.extend(self.pending[:count])
            del self.pending[:count]
            taken += count
        return entries

    def take_whole_media(self, chunk: MediaChunk) -> BatchMedia:
        """All of ``chunk``'s rows (it starts the pending prompt), for a decode of its own."""
        count = chunk.n_tokens
        self.cached.extend(self.pending[:count])
        del self.pending[:count]
        return BatchMedia(chunk, 0, count, self.position(chunk.start), self.id, not self.pending)

    def start(self, job: Job, sampler: Sampler, keep: int) -> None:
        prompt = list(job.request.prompt)
        self.job = job
        self.state = SlotState.PREFILL
        self.offered = False
        self.sampler = sampler
        self.media = list(job.request.media)
        del self.cached[keep:]
        self.pending = prompt[keep:]
        self.next_token = -1
        self.generation = Generation(job.request)
        self.reasoning = BudgetGate(job.request.reasoning) if job.request.reasoning is not None else None
        self.leader = None
        self.n_prompt = len(prompt)
        self.cache_n = keep
        self.shifted = False
        self.draft = []
        self.draft_n = self.draft_accepted = 0
        self.t_start = time.perf_counter()
        self.t_prompt_done = 0.0
        self.t_last = 0.0
        self.last_task = job.id
        self.last_request = job.request
        self.last_prompt_n = len(prompt) - keep

    def release(self) -> None:
        if self.sampler is not None:
            self.sampler.free()
        self.sampler = None
        self.job = None
        self.state = SlotState.IDLE
        self.pending = []
        self.leader = None
        self.last_used = time.monotonic()

    def timings(self, n_predicted: int) -> Timings:
        """The job's timings so far (``timings``; with ``timings_per_token`` on every chunk, prompt progress
        included, as llama-server's)."""
        end = self.t_last or time.perf_counter()
        return Timings(cache_n=self.cache_n, prompt_n=self.n_prompt - self.cache_n,
                       prompt_ms=((self.t_prompt_done or end) - self.t_start) * 1000.0, predicted_n=n_predicted,
                       predicted_ms=(end - self.t_prompt_done) * 1000.0 if self.t_prompt_done else 0.0,
                       draft_n=self.draft_n, draft_n_accepted=self.draft_accepted)

    def view(self, n_ctx: int, speculative: bool = False) -> SlotView:
        """What /slots shows of this slot (read from another thread: a snapshot, not a lock)."""
        request = self.last_request
        busy = self.busy
        if not busy:  # as llama-server's release: the finished task's counters start again
            return SlotView(
                id=self.id, n_ctx=n_ctx, is_processing=False, id_task=self.last_task, n_cached=len(self.cached),
                n_prompt_processed=0, n_prompt_cache=0, n_decoded=0, n_remain=-1, has_next_token=False,
                has_new_line=False, request=request, speculative=speculative,
            )
        n_predict = request.n_predict if request else -1
        n_decoded = len(self.generation.tokens) if self.generation else 0
        return SlotView(
            id=self.id, n_ctx=n_ctx, is_processing=True, id_task=self.last_task,
            n_cached=len(self.cached), n_prompt_processed=self.last_prompt_n, n_prompt_cache=self.cache_n,
            n_decoded=n_decoded, n_remain=(n_predict - n_decoded) if n_predict >= 0 else -1,
            has_next_token=True, has_new_line=bool(self.generation and "\n" in self.generation.text),
            request=request, speculative=speculative,
        )
