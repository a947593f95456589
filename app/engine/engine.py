"""The engine thread: owns the backend, admits jobs into slots and decodes every live slot together.

Each step builds one batch: one token for every generating slot, then prompt chunks of the slots
still prefilling, up to ``n_batch`` tokens in all, and calls ``decode`` once. Then every slot that
had an output samples its next token, detokenizes it and checks its stop conditions. HTTP threads
only call ``submit`` (thread-safe) and read the job's event queue.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from app.engine.backend import Backend, BatchToken, ModelInfo, Vocabulary
from app.engine.errors import (
    CancelledError,
    ContextExceededError,
    DecodeError,
    EngineError,
    InvalidJobError,
    NotReadyError,
)
from app.engine.slots import EventSink, Job, Slot, SlotState
from app.engine.stats import EngineStats, StatsRecorder
from app.engine.text import scan_for_stop
from app.engine.types import Completion, FinishReason, GenerationRequest, Timings, TokenChunk

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
        self._pending: deque[Job] = deque()
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

    def submit(self, request: GenerationRequest, sink: EventSink | None = None, index: int = 0) -> Job:
        """Validate and queue a request; raises the engine error that rejects it, if any."""
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
        if self._options.n_predict_cap >= 0 and (
            request.n_predict < 0 or request.n_predict > self._options.n_predict_cap
        ):
            request = replace(request, n_predict=self._options.n_predict_cap)
        job = Job(request, sink, index)
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
        self._slots = [Slot(index) for index in range(backend.n_seq)]
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
            self._serve(backend)
        except BaseException:
            log.exception("the engine thread failed")
            raise
        finally:
            self._stopped.set()
            self._fail_everything(NotReadyError("the server is shutting down"))
            backend.close()

    def _serve(self, backend: Backend) -> None:
        while True:
            busy = any(slot.busy for slot in self._slots)
            if not self._take_inbox(block=not busy and not self._pending):
                return
            self._admit(backend)
            self._stats.on_load(
                sum(slot.busy for slot in self._slots), len(self._pending)
            )
            if any(slot.busy for slot in self._slots):
                self._step(backend)

    def _take_inbox(self, block: bool) -> bool:
        """Move submitted jobs to the pending queue; False once asked to stop."""
        try:
            item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if item is None:
                return False
            self._pending.append(item)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return True

    def _admit(self, backend: Backend) -> None:
        if not self._options.cont_batching and any(slot.busy for slot in self._slots):
            return
        waiting: deque[Job] = deque()
        while self._pending:
            job = self._pending.popleft()
            if job.cancelled:
                job.emit(CancelledError())
                continue
            slot = self._pick_slot(job)
            if slot is None:
                waiting.append(job)
                if job.request.id_slot < 0:
                    break
                continue
            self._start(backend, slot, job)
        waiting.extend(self._pending)
        self._pending = waiting

    def _pick_slot(self, job: Job) -> Slot | None:
        request = job.request
        if request.id_slot >= 0:
            slot = self._slots[request.id_slot]
            return None if slot.busy else slot
        idle = [slot for slot in self._slots if not slot.busy]
        if not idle:
            return None
        if request.cache_prompt:
            best = max(idle, key=lambda slot: (slot.reusable_prefix(request.prompt), -slot.last_used))
            if best.reusable_prefix(request.prompt) > 0:
                return best
        return min(idle, key=lambda slot: slot.last_used)

    def _start(self, backend: Backend, slot: Slot, job: Job) -> None:
        request = job.request
        keep = slot.reusable_prefix(request.prompt) if request.cache_prompt else 0
        if not backend.forget(slot.id, keep):
            keep = 0
        sampling = request.sampling
        if sampling.ignore_eos:
            bias = tuple((token, float("-inf")) for token in backend.vocab.eog_tokens())
            sampling = replace(sampling, logit_bias=sampling.logit_bias + bias)
        slot.start(job, backend.new_sampler(sampling), keep)

    def _step(self, backend: Backend) -> None:
        for slot in self._slots:
            if slot.job is not None and slot.job.cancelled:
                job = slot.job
                slot.release()
                job.emit(CancelledError())
        batch: list[BatchToken] = []
        outputs: list[tuple[Slot, int]] = []
        for slot in self._slots:
            if slot.state is SlotState.GENERATE:
                outputs.append((slot, len(batch)))
                batch.append(BatchToken(slot.next_token, len(slot.cached), slot.id, True))
                slot.cached.append(slot.next_token)
        for slot in self._slots:
            room = backend.n_batch - len(batch)
            if room <= 0:
                break
            if slot.state is not SlotState.PREFILL:
                continue
            chunk, slot.pending = slot.pending[:room], slot.pending[room:]
            for token in chunk:
                batch.append(BatchToken(token, len(slot.cached), slot.id, False))
                slot.cached.append(token)
            if not slot.pending:
                batch[-1] = replace(batch[-1], logits=True)
                outputs.append((slot, len(batch) - 1))
        if not batch:
            return
        in_batch = {token.seq for token in batch}
        try:
            backend.decode(batch)
        except DecodeError as exc:
            log.error("llama_decode failed (%s) for slots %s", exc.code, sorted(in_batch))
            for slot in self._slots:
                if slot.id in in_batch and slot.job is not None:
                    self._fail(backend, slot, exc)
            return
        self._stats.on_decode(len(batch), len(in_batch))
        for slot, index in outputs:
            self._after_decode(backend, slot, index)

    def _after_decode(self, backend: Backend, slot: Slot, index: int) -> None:
        assert slot.job is not None and slot.sampler is not None
        request = slot.job.request
        now = time.perf_counter()
        if slot.state is SlotState.PREFILL:
            slot.state = SlotState.GENERATE
            slot.t_prompt_done = now
            self._stats.on_prompt_done(slot.n_prompt - slot.cache_n, now - slot.t_start)
            if request.n_predict == 0:
                self._finish(backend, slot, FinishReason.LIMIT, None)
                return
        token = slot.sampler.sample(index)
        slot.t_last = time.perf_counter()
        if backend.vocab.is_eog(token) and not request.sampling.ignore_eos:
            self._finish(backend, slot, FinishReason.EOS, None)
            return
        slot.next_token = token
        slot.generated.append(token)
        slot.unsent_tokens.append(token)
        slot.text += slot.utf8.feed(backend.vocab.piece(token, False))
        scan = scan_for_stop(slot.text, slot.stop_searched, request.stop)
        slot.stop_searched = len(slot.text)
        if scan.stop_word is not None:
            slot.text = slot.text[: scan.safe_end]
            self._finish(backend, slot, FinishReason.WORD, scan.stop_word)
            return
        if 0 <= request.n_predict <= len(slot.generated):
            self._finish(backend, slot, FinishReason.LIMIT, None)
            return
        if len(slot.cached) + 1 >= backend.n_ctx_seq:
            self._finish(backend, slot, FinishReason.LIMIT, None, truncated=True)
            return
        if scan.safe_end > slot.sent:
            self._send_chunk(slot, scan.safe_end)

    def _send_chunk(self, slot: Slot, end: int) -> None:
        assert slot.job is not None
        slot.job.emit(TokenChunk(slot.text[slot.sent:end], tuple(slot.unsent_tokens),
                                 len(slot.generated), slot.id))
        slot.sent = end
        slot.unsent_tokens = []

    def _finish(
        self,
        backend: Backend,
        slot: Slot,
        reason: FinishReason,
        stop_word: str | None,
        truncated: bool = False,
    ) -> None:
        assert slot.job is not None
        if reason is not FinishReason.WORD:
            slot.text += slot.utf8.flush()
        if len(slot.text) > slot.sent or slot.unsent_tokens:
            self._send_chunk(slot, len(slot.text))
        end = slot.t_last or time.perf_counter()
        predicted_ms = (end - slot.t_prompt_done) * 1000.0 if slot.t_prompt_done else 0.0
        prompt_ms = ((slot.t_prompt_done or end) - slot.t_start) * 1000.0
        self._stats.on_generation_done(len(slot.generated), predicted_ms / 1000.0)
        job = slot.job
        completion = Completion(
            text=slot.text,
            tokens=tuple(slot.generated),
            finish=reason,
            stopping_word=stop_word or "",
            truncated=truncated,
            n_prompt=slot.n_prompt,
            n_cached_after=len(slot.cached),
            id_slot=slot.id,
            timings=Timings(
                cache_n=slot.cache_n,
                prompt_n=slot.n_prompt - slot.cache_n,
                prompt_ms=prompt_ms,
                predicted_n=len(slot.generated),
                predicted_ms=predicted_ms,
            ),
        )
        slot.release()  # before the answer goes out, so /slots never shows a finished job as running
        job.emit(completion)

    def _fail(self, backend: Backend, slot: Slot, error: EngineError) -> None:
        job = slot.job
        backend.forget(slot.id, 0)
        slot.cached.clear()
        slot.release()
        if job is not None:
            job.emit(error)

    def _fail_everything(self, error: EngineError) -> None:
        for slot in self._slots:
            if slot.job is not None:
                job = slot.job
                slot.release()
                job.emit(error)
        for job in self._pending:
            job.emit(error)
        self._pending.clear()
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item.emit(error)
