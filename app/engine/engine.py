"""The engine thread: owns the backend and runs the scheduler (``scheduler.py``) step by step.

HTTP threads only call ``submit`` (thread-safe) and read the job's event queue; everything that
touches llama.cpp state happens on this one thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from app.engine.backend import Backend, ModelInfo, Vocabulary
from app.engine.errors import ContextExceededError, EngineError, InvalidJobError, NotReadyError
from app.engine.scheduler import Scheduler, SchedulerOptions
from app.engine.slots import EventSink, Job, Slot
from app.engine.stats import EngineStats, StatsRecorder
from app.engine.types import RANDOM_SEED, GenerationRequest

log = logging.getLogger(__name__)

BackendFactory = Callable[[], Backend]


@dataclass(frozen=True)
class EngineOptions:
    cont_batching: bool = True
    n_predict_cap: int = -1


@dataclass(frozen=True)
class SlotView:
    """What /slots shows of a slot, read without stopping the engine."""

    id: int
    n_ctx: int
    is_processing: bool
    id_task: int | None
    n_cached: int
    n_prompt_processed: int
    n_prompt_cache: int
    n_decoded: int
    n_remain: int
    has_next_token: bool
    has_new_line: bool
    request: GenerationRequest | None


class Engine:
    def __init__(self, backend_factory: BackendFactory, options: EngineOptions | None = None) -> None:
        self._factory = backend_factory
        self._options = options or EngineOptions()
        self._inbox: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._slots: list[Slot] = []
        self._backend: Backend | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._load_error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._stats = StatsRecorder()
        self.on_load_failure: Callable[[BaseException], None] | None = None
        self.on_ready: Callable[[], None] | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the engine thread and free the model (cancels what is still running)."""
        self._inbox.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set() and not self._stopped.is_set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    @property
    def load_error(self) -> BaseException | None:
        return self._load_error

    def _loaded(self) -> Backend:
        if self._backend is None or not self._ready.is_set():
            raise NotReadyError()
        return self._backend

    @property
    def info(self) -> ModelInfo:
        return self._loaded().info

    @property
    def vocab(self) -> Vocabulary:
        return self._loaded().vocab

    @property
    def n_slots(self) -> int:
        return self._loaded().n_seq

    @property
    def n_ctx_slot(self) -> int:
        return self._loaded().n_ctx_seq

    def stats(self) -> EngineStats:
        return self._stats.snapshot()

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
        if any(token < 0 or token >= backend.info.n_vocab for token in request.prompt):
            raise InvalidJobError("Prompt contains invalid tokens")
        if request.id_slot >= backend.n_seq:
            raise InvalidJobError(f"Invalid slot ID: id_slot must be below {backend.n_seq}")
        if not 1 <= copies <= backend.n_seq:
            raise InvalidJobError(f"n must be between 1 and the number of slots ({backend.n_seq}), got {copies}")
        if request.sampling.grammar:
            problem = backend.vocab.grammar_error(request.sampling.grammar)
            if problem:
                raise InvalidJobError(f"Failed to initialize samplers: {problem}")
        if self._options.n_predict_cap >= 0 and (
            request.n_predict < 0 or request.n_predict > self._options.n_predict_cap
        ):
            request = replace(request, n_predict=self._options.n_predict_cap)
        job = Job(request, sink, index)
        for copy in range(1, copies):
            sampling = request.sampling
            if sampling.seed != RANDOM_SEED:
                sampling = replace(sampling, seed=(sampling.seed + copy) % RANDOM_SEED)
            job.followers.append(Job(replace(request, sampling=sampling, id_slot=-1), job.sink, index + copy))
        self._inbox.put(job)
        return job

    def slot_views(self) -> list[SlotView]:
        backend = self._loaded()
        views = []
        for slot in list(self._slots):
            request = slot.last_request
            n_predict = request.n_predict if request else -1
            n_decoded = len(slot.generated)
            views.append(SlotView(
                id=slot.id,
                n_ctx=backend.n_ctx_seq,
                is_processing=slot.busy,
                id_task=slot.last_task,
                n_cached=len(slot.cached),
                n_prompt_processed=slot.last_prompt_n,
                n_prompt_cache=slot.cache_n,
                n_decoded=n_decoded,
                n_remain=(n_predict - n_decoded) if n_predict >= 0 else -1,
                has_next_token=slot.busy,
                has_new_line="\n" in slot.text,
                request=request,
            ))
        return views

    # ---- the engine thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            backend = self._factory()
        except BaseException as exc:  # report any load failure, then let the owner exit
            self._load_error = exc
            log.error("failed to load the model: %s", exc)
            if self.on_load_failure is not None:
                self.on_load_failure(exc)
            return
        self._backend = backend
        scheduler = Scheduler(backend, self._stats, SchedulerOptions(cont_batching=self._options.cont_batching))
        self._slots = scheduler.slots
        self._ready.set()
        log.info("model loaded: %s slots of %s tokens", backend.n_seq, backend.n_ctx_seq)
        if self.on_ready is not None:
            try:
                self.on_ready()
            except Exception as exc:
                self._load_error = exc
                log.error("the model loaded but cannot be served: %s", exc)
                self._stopped.set()
                backend.close()
                if self.on_load_failure is not None:
                    self.on_load_failure(exc)
                return
        try:
            self._serve(scheduler)
        except BaseException:
            log.exception("the engine thread failed")
            raise
        finally:
            self._stopped.set()
            self._fail_everything(scheduler, NotReadyError("the server is shutting down"))
            backend.close()

    def _serve(self, scheduler: Scheduler) -> None:
        while True:
            if not self._take_inbox(scheduler, block=not scheduler.busy and not scheduler.pending):
                return
            scheduler.admit()
            scheduler.report_load()
            if scheduler.busy:
                scheduler.step()

    def _take_inbox(self, scheduler: Scheduler, block: bool) -> bool:
        """Move submitted jobs to the pending queue; False once asked to stop."""
        try:
            item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if item is None:
                return False
            scheduler.pending.append(item)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return True

    def _fail_everything(self, scheduler: Scheduler, error: EngineError) -> None:
        scheduler.fail_everything(error)
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                for member in item.family:
                    member.emit(error)
