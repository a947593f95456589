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

import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TypeVar

from app.engine.backend import Backend, Media, ModelInfo, Vocabulary
from app.engine.errors import (
    ContextExceededError,
    EngineError,
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

BackendFactory = Callable[[], Backend]
T = TypeVar("T")
# Set while a request admitted as one submits its jobs (Engine.admitted_as_one).
_ADMITTED: ContextVar[bool] = ContextVar("admitted_as_one", default=False)


class Signal(enum.Enum):
    """What the engine thread is told besides work."""

    WAKE = "wake"  # load the sleeping model (work will follow)
    STOP = "stop"  # free the model and end the thread


InboxItem = Job | EmbedJob | ControlJob | Signal
POLL_SECONDS = 0.5


@dataclass(frozen=True)
class ModelFacts:
    """Kept across sleep: what the model and its context look like."""

    info: ModelInfo
    n_seq: int
    n_ctx_seq: int
    vision: bool = False  # what the multimodal projector takes
    audio: bool = False
    media_marker: str | None = None  # the text that stands for a media item; None: text only
    speculative: bool = False  # the slots' jobs decode speculatively


class Engine:
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

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    @property
    def load_error(self) -> BaseException | None:
        return self._load_error

    def _context_shift(self, backend: Backend) -> bool:
        if self._options.context_shift and backend.media is not None:
            log.warning("--context-shift is off: a multimodal projector is loaded (an image's rows cannot be shifted)")
            return False
        return self._options.context_shift

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

    # ---- the engine thread -----------------------------------------------------------------

    def _load(self) -> Scheduler | None:
        try:
            backend = self._factory()
        except BaseException as exc:  # report any load failure, then let the owner exit
            self._load_error = exc
            log.error("failed to load the model: %s", exc)
            if self.on_load_failure is not None:
                self.on_load_failure(exc)
            return None
        self._backend = backend
        options = self._options
        # EngineOptions is a SchedulerOptions: the scheduler reads its own fields of it
        scheduler = Scheduler(backend, self._stats, replace(options, context_shift=self._context_shift(backend)))
        media = backend.media
        self._facts = ModelFacts(backend.info, backend.n_seq, backend.n_ctx_seq,
                                 vision=media is not None and media.vision, audio=media is not None and media.audio,
                                 media_marker=media.marker if media is not None else None,
                                 speculative=scheduler.speculator is not None)
        self._slots = scheduler.slots
        self._awake.set()
        return scheduler

    def _run(self) -> None:
        scheduler = self._load()
        if scheduler is None:
            return
        log.info("model loaded: %s slots of %s tokens", scheduler.backend.n_seq, scheduler.backend.n_ctx_seq)
        if self.on_ready is not None:
            try:
                self.on_ready()
            except Exception as exc:
                self._load_error = exc
                log.error("the model loaded but cannot be served: %s", exc)
                self._stopped.set()
                scheduler.backend.close()
                if self.on_load_failure is not None:
                    self.on_load_failure(exc)
                return
        # Ready (health 200) only once on_ready has published what the handlers need (the chat
        # template): before, /health could say 200 while a chat still answered 503.
        self._ready.set()
        try:
            while scheduler is not None:
                scheduler = self._serve(scheduler)
        except BaseException:
            log.exception("the engine thread failed")
            raise
        finally:
            self._stopped.set()
            self._fail_everything(self._current, NotReadyError("the server is shutting down"))
            if self._backend is not None:
                self._backend.close()
                self._backend = None

    def _serve(self, scheduler: Scheduler) -> Scheduler | None:
        """Run until asked to stop (None) or until the model goes to sleep and wakes again."""
        self._current = scheduler
        idle_since = time.monotonic()
        while True:
            busy = scheduler.busy or scheduler.pending or scheduler.embeddings
            if not self._take_inbox(scheduler, block=not busy):
                return None
            if busy or scheduler.pending or scheduler.embeddings:
                idle_since = time.monotonic()
            started = time.perf_counter()
            try:
                scheduler.run_controls()
                scheduler.run_embeddings()
                scheduler.admit()
                scheduler.report_load()
                if scheduler.busy:
                    decoding = scheduler.step()
                    if decoding:  # the engine thread's own time this step: batches, sampling, text, events
                        self._stats.on_step(time.perf_counter() - started - decoding)
                    idle_since = time.monotonic()
                elif self._should_sleep(idle_since, scheduler):
                    return self._sleep_until_needed(scheduler)
            except Exception as exc:  # a bug must cost the running jobs, never the engine thread
                log.exception("engine step failed; failing the running jobs and going on")
                scheduler.fail_running(EngineError(f"internal error: {type(exc).__name__}: {exc}"))

    def _should_sleep(self, idle_since: float, scheduler: Scheduler) -> bool:
        limit = self._options.sleep_idle_seconds
        return limit >= 0 and not scheduler.pending and time.monotonic() - idle_since >= limit

    def _sleep_until_needed(self, scheduler: Scheduler) -> Scheduler | None:
        log.info("idle for %ss: freeing the model until the next request", self._options.sleep_idle_seconds)
        self._awake.clear()
        self._current = None
        scheduler.backend.close()
        self._backend = None
        self._stats.on_sleep(True)
        item = self._inbox.get()
        if item is Signal.STOP:
            return None
        log.info("waking: loading the model again")
        woken = self._load()
        self._stats.on_sleep(False)
        if woken is None:
            self._stopped.set()
            return None
        if item is not Signal.WAKE:
            self._inbox.put(item)
        return woken

    def _take_inbox(self, scheduler: Scheduler, block: bool) -> bool:
        """Move submitted work to the scheduler's queues; False once asked to stop."""
        try:
            item = self._inbox.get(timeout=POLL_SECONDS) if block else self._inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if item is Signal.STOP:
                return False
            if isinstance(item, Job):
                scheduler.pending.append(item)
            elif isinstance(item, EmbedJob):
                scheduler.embeddings.append(item)
            elif isinstance(item, ControlJob):
                scheduler.controls.append(item)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return True

    def _fail_everything(self, scheduler: Scheduler | None, error: EngineError) -> None:
        if scheduler is not None:
            scheduler.fail_everything(error)
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Job):
                for member in item.family:
                    member.emit(error)
            elif isinstance(item, EmbedJob | ControlJob):
                item.outcome.set_exception(error)


__all__ = ["Engine", "EngineOptions", "SlotView"]
