"""The engine's thread: it loads the model, runs the scheduler's steps while there is work, takes what
the HTTP threads put in its inbox, sleeps after ``--sleep-idle-seconds`` and wakes on the next job.
``Engine`` (engine.py) mixes it in beside the doors the HTTP threads use.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from app.engine.backend import Backend, ModelInfo
from app.engine.errors import EngineError, NotReadyError
from app.engine.options import EngineOptions
from app.engine.scheduler import Scheduler
from app.engine.slots import ControlJob, EmbedJob, Job, Slot
from app.engine.stats import StatsRecorder

log = logging.getLogger(__name__)

BackendFactory = Callable[[], Backend]


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
    video: bool = False
    media_marker: str | None = None  # the text that stands for a media item; None: text only
    speculative: bool = False  # the slots' jobs decode speculatively


class EngineThread:
    """The thread's half of ``Engine``: the state it shares with the HTTP side's doors is declared here."""

    _factory: BackendFactory
    _options: EngineOptions
    _inbox: queue.SimpleQueue[InboxItem]
    _slots: list[Slot]
    _backend: Backend | None
    _facts: ModelFacts | None
    _ready: threading.Event
    _awake: threading.Event
    _stopped: threading.Event
    _load_error: BaseException | None
    _stats: StatsRecorder
    _current: Scheduler | None
    _step_since: float | None  # when the running step began (monotonic); None between steps
    on_ready: Callable[[], None] | None
    on_load_failure: Callable[[BaseException], None] | None

    def _context_shift(self, backend: Backend) -> bool:
        if self._options.context_shift and backend.media is not None:
            log.warning("--context-shift is off: a multimodal projector is loaded (an image's rows cannot be shifted)")
            return False
        return self._options.context_shift

    # ---- the engine thread -----------------------------------------------------------------

    def _load(self) -> Scheduler | None:
        options = self._options
        try:
            backend = self._factory()
            try:  # EngineOptions is a SchedulerOptions: the scheduler reads its own fields of it
                scheduler = Scheduler(backend, self._stats, replace(options,
                                                                    context_shift=self._context_shift(backend)))
            except BaseException:  # its drafters' files, say: the model is let go
                backend.close()
                raise
        except BaseException as exc:  # report any load failure, then let the owner exit
            self._load_error = exc
            log.error("failed to load the model: %s", exc)
            if self.on_load_failure is not None:
                self.on_load_failure(exc)
            return None
        self._backend = backend
        media = backend.media
        self._facts = ModelFacts(backend.info, backend.n_seq, backend.n_ctx_seq,
                                 vision=media is not None and media.vision, audio=media is not None and media.audio,
                                 video=media is not None and media.video,
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
            self._step_since = time.monotonic()
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
                    break
            except Exception as exc:  # a bug must cost the running jobs, never the engine thread
                log.exception("engine step failed; failing the running jobs and going on")
                scheduler.fail_running(EngineError(f"internal error: {type(exc).__name__}: {exc}"))
            finally:
                self._step_since = None
        # asleep (waiting for the next job, then loading the model again) is no step: alive, however long
        return self._sleep_until_needed(scheduler)

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
