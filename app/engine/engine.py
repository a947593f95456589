"""The engine thread: owns the backend and runs the scheduler (``scheduler.py``) step by step.

HTTP threads only call ``submit``, ``submit_embeddings``, ``control`` and the slot-file methods
(thread-safe) and read the job's event queue; everything that touches llama.cpp state happens on
this one thread. The one exception is ``vocab``: the vocabulary's functions (tokenize, pieces,
built-in templates, schema to grammar) only read the loaded model, which llama.cpp allows from any
thread (tests/unit/test_structure.py checks that handlers reach llama.cpp through nothing else). With
``sleep_idle_seconds`` the model is freed after that long without work and loaded again by the next
job; facts about the model (``info``, slot counts) stay answerable while it sleeps.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import TypeVar

from app.engine.backend import Backend, Media, ModelInfo, Vocabulary
from app.engine.engine_thread import POLL_SECONDS, BackendFactory, EngineThread, InboxItem, ModelFacts, Signal
from app.engine.errors import (
    ContextExceededError,
    InvalidJobError,
    MediaError,
    NotReadyError,
    OverloadedError,
    QueueFullError,
)
from app.engine.grammar_guard import check_grammar
from app.engine.options import EngineOptions
from app.engine.scheduler import Scheduler
from app.engine.slot_files import SlotFileResult, erase_slot, restore_slot, save_slot
from app.engine.slots import ControlJob, EmbedJob, EventSink, Job, Slot
from app.engine.stats import EngineStats, StatsRecorder
from app.engine.types import RANDOM_SEED, GenerationRequest, SlotView

log = logging.getLogger(__name__)

T = TypeVar("T")
# Set while a request admitted as one submits its jobs (Engine.admitted_as_one).
_ADMITTED: ContextVar[bool] = ContextVar("admitted_as_one", default=False)


class Engine(EngineThread):
    def __init__(
        self,
        backend_factory: BackendFactory,
        options: EngineOptions | None = None,
        on_ready: Callable[[], None] | None = None,
        on_load_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        """``on_ready`` runs on the engine thread once the model is loaded and before the engine reports
        ready (an exception there is a load failure); ``on_load_failure`` is told why a load failed."""
        self._factory = backend_factory
        self._options = options or EngineOptions()
        self._inbox: queue.SimpleQueue[InboxItem] = queue.SimpleQueue()
        self._slots: list[Slot] = []
        self._backend: Backend | None = None
        self._facts: ModelFacts | None = None
        self._ready = threading.Event()  # loaded once: the server serves from now on
        self._awake = threading.Event()  # the model is in memory now
        self._stopped = threading.Event()
        self._load_error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stats = StatsRecorder()
        self._lora_scales: tuple[float, ...] = self._options.lora_scales
        self._current: Scheduler | None = None
        self._step_since: float | None = None
        self._outstanding = 0  # submitted generation jobs (followers included) not finished yet
        self._outstanding_lock = threading.Lock()
        self.on_load_failure = on_load_failure
        self.on_ready = on_ready

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the engine thread and free the model (fails what is still running)."""
        self._inbox.put(Signal.STOP)
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set() and not self._stopped.is_set()

    @property
    def is_sleeping(self) -> bool:
        return self._ready.is_set() and not self._awake.is_set() and not self._stopped.is_set()

    def stalled(self, limit_seconds: float) -> str | None:
        """Why the engine is not alive (liveness), or None: its thread ended without being stopped, or one
        step (a decode, a prompt's batch) has run longer than ``limit_seconds``. Loading, sleeping and
        waiting for work are alive."""
        if self._thread is not None and not self._thread.is_alive() and not self._stopped.is_set():
            return "the engine thread has ended"
        if self._stopped.is_set() and self._load_error is None and self._ready.is_set():
            return "the engine has stopped"
        since = self._step_since
        running = time.monotonic() - since if since is not None else 0.0
        if limit_seconds > 0 and running > limit_seconds:
            return f"one engine step has run for {running:.0f} s (over --liveness-seconds)"
        return None

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    @property
    def load_error(self) -> BaseException | None:
        return self._load_error

    def _known(self) -> ModelFacts:
        """What the loaded model is; known from the load on (on_ready reads it before the engine is ready)."""
        if self._facts is None:
            raise NotReadyError()
        return self._facts

    def _loaded(self) -> Backend:
        """The backend, woken first if it sleeps."""
        self._known()
        if not self._awake.is_set():
            self._inbox.put(Signal.WAKE)
            while not self._awake.wait(POLL_SECONDS):
                if self._stopped.is_set() or self._load_error is not None:
                    raise NotReadyError("the model could not be loaded again")
        if self._backend is None:
            raise NotReadyError()
        return self._backend

    @property
    def info(self) -> ModelInfo:
        return self._known().info

    @property
    def vocab(self) -> Vocabulary:
        """The model's vocabulary, safe from any thread; it needs the model in memory, so it wakes a
        sleeping one (as llama-server's tokenize does)."""
        return self._loaded().vocab

    @property
    def media(self) -> Media | None:
        """The multimodal projector (tokenizing prompts with media: safe from any thread), or None."""
        return self._loaded().media

    @property
    def facts(self) -> ModelFacts:
        """What the model and its context are, without waking a sleeping model."""
        return self._known()

    @property
    def n_slots(self) -> int:
        return self._known().n_seq

    @property
    def n_ctx_slot(self) -> int:
        return self._known().n_ctx_seq

    def stats(self) -> EngineStats:
        return self._stats.snapshot()

    # ---- LoRA scales -----------------------------------------------------------------------

    @property
    def lora_scales(self) -> tuple[float, ...]:
        """The global adapter scales new requests get (running ones keep theirs)."""
        return self._lora_scales

    def set_lora_scales(self, scales: tuple[float, ...]) -> None:
        if len(scales) != len(self._options.lora_scales):
            raise InvalidJobError(f"expected {len(self._options.lora_scales)} LoRA scales, got {len(scales)}")
        self._lora_scales = scales

    # ---- the HTTP side ---------------------------------------------------------------------

    def submit(
        self, request: GenerationRequest, sink: EventSink | None = None, index: int = 0, copies: int = 1
    ) -> Job:
        """Validate and queue a request; raises the engine error that rejects it, if any.

        With ``copies`` > 1 the job gets ``copies - 1`` followers (indexes ``index + 1`` ...): more
        completions of the same prompt, which is decoded once. A fixed seed is offset per copy, so
        the copies differ but stay reproducible.
        """
        backend = self._loaded()
        n_prompt = len(request.prompt)
        if n_prompt == 0:
            raise InvalidJobError("the prompt is empty: it must hold at least one token")
        if n_prompt >= backend.n_ctx_seq:
            raise ContextExceededError(n_prompt, backend.n_ctx_seq)
        if request.media and backend.media is None:
            raise MediaError(-1, "this model has no multimodal projector: start the server with --mmproj")
        if backend.info.outside_vocabulary(request.text_tokens()):
            raise InvalidJobError("Prompt contains invalid tokens")
        for chunk in request.media:
            if chunk.n_tokens > backend.n_batch and backend.media is not None and backend.media.whole(chunk):
                raise MediaError(-1, f"a media item takes {chunk.n_tokens} tokens, and this model decodes it in "
                                     f"one batch of at most {backend.n_batch}: raise --batch-size")
        if request.id_slot >= backend.n_seq:
            raise InvalidJobError(f"Invalid slot ID: id_slot must be below {backend.n_seq}")
        if not 1 <= copies <= backend.n_seq:
            raise InvalidJobError(f"n must be between 1 and the number of slots ({backend.n_seq}), got {copies}")
        check_grammar(request.sampling.grammar)
        if request.lora is None:
            request = replace(request, lora=self._lora_scales)
        if self._options.deadline_seconds > 0 and request.deadline is None:
            request = replace(request, deadline=time.monotonic() + self._options.deadline_seconds)
        if request.n_predict == -1 and self._options.n_predict_default != -1:  # a request's own budget wins
            request = replace(request, n_predict=self._options.n_predict_default)
        job = Job(request, sink, index)
        for copy in range(1, copies):
            sampling = request.sampling
            if sampling.seed != RANDOM_SEED:
                sampling = replace(sampling, seed=(sampling.seed + copy) % RANDOM_SEED)
            job.followers.append(Job(replace(request, sampling=sampling, id_slot=-1), job.sink, index + copy))
        self._admit_to_queue(job.family, backend.n_seq)
        self._inbox.put(job)
        return job

    @contextmanager
    def admitted_as_one(self) -> Iterator[None]:
        """Admit a request of many jobs (a predict's instances) as ONE place in the queue, or refuse
        it whole (QueueFullError). Jobs submitted in this context, and in copies of it made here
        for other threads (``contextvars.copy_context``), are not counted or refused for load."""
        self._take_places(1, self._loaded().n_seq, QueueFullError, "retry this request")
        token = _ADMITTED.set(True)
        try:
            yield
        finally:
            _ADMITTED.reset(token)
            self._job_finished()

    def _admit_to_queue(self, family: list[Job], n_slots: int) -> None:
        """Count the jobs in; refuse them when more than ``max_queue`` would wait for a slot (not
        the jobs of a request admitted as one: it holds its place already)."""
        if _ADMITTED.get():
            return
        self._take_places(len(family), n_slots, OverloadedError, "try again shortly")
        for member in family:
            member.on_finish = self._job_finished

    def _take_places(self, count: int, n_slots: int, refusal: type[OverloadedError], advice: str) -> None:
        """Count ``count`` places in; refuse them all when more than ``max_queue`` would then wait."""
        with self._outstanding_lock:
            if self._outstanding + count - n_slots > self._options.max_queue:
                raise refusal(f"the server is busy: {self._outstanding} requests are running or waiting "
                              f"(at most {self._options.max_queue} may wait, --max-queue); {advice}")
            self._outstanding += count

    def _job_finished(self) -> None:
        with self._outstanding_lock:
            self._outstanding -= 1

    def submit_embeddings(self, inputs: Sequence[Sequence[int]]) -> EmbedJob:
        """Queue token inputs for embedding. Whether each fits the embedding context is known on the
        engine thread (the context's own size: app/engine/embedding_batches.py), and is the job's
        outcome."""
        backend = self._loaded()
        if not inputs:
            raise InvalidJobError("Input content cannot be empty")
        for tokens in inputs:
            if not tokens:
                raise InvalidJobError("Input content cannot be empty")
            if backend.info.outside_vocabulary(tokens):
                raise InvalidJobError("Prompt contains invalid tokens")
        job = EmbedJob(tuple(tuple(tokens) for tokens in inputs))
        self._inbox.put(job)
        return job

    def control(self, action: Callable[[Scheduler], T], timeout: float = 600.0) -> T:
        """Run ``action`` on the engine thread between two steps and return its result."""
        self._loaded()
        job = ControlJob(action)
        self._inbox.put(job)
        try:
            result: T = job.outcome.result(timeout=timeout)
        except FutureTimeout:
            raise NotReadyError("the engine did not answer in time") from None
        return result

    def end_reasoning(self, completion_id: str) -> tuple[bool, str]:
        """Force the end of a running completion's thinking (its ``completion_id``, with reasoning
        control on): (done, why not)."""
        return self.control(lambda scheduler: scheduler.end_reasoning(completion_id))

    def save_slot(self, slot: int, path: str) -> SlotFileResult:
        """Write an idle slot's KV cells and tokens to ``path`` (on the engine thread)."""
        return self.control(lambda scheduler: save_slot(scheduler, slot, path))

    def restore_slot(self, slot: int, path: str) -> SlotFileResult:
        return self.control(lambda scheduler: restore_slot(scheduler, slot, path))

    def erase_slot(self, slot: int) -> SlotFileResult:
        return self.control(lambda scheduler: erase_slot(scheduler, slot))

    def slot_views(self) -> list[SlotView]:
        facts = self._known()
        return [slot.view(facts.n_ctx_seq, facts.speculative) for slot in list(self._slots)]


__all__ = ["Engine", "EngineOptions", "SlotView"]
