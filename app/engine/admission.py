"""The scheduler's admission: which idle slot a waiting job takes (the one holding the longest share of
its prompt, else the least recently used), and a job's start there: the cached prefix kept, chunks of
the cache moved into place (``n_cache_reuse``), the prompt cache, idle slots' prompts saved, followers
(n > 1) given the leader's cells. ``Scheduler`` (scheduler.py) mixes it in and runs the steps. Runs on the
engine thread only.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections import deque

from app.engine.backend import Backend
from app.engine.checkpoints import WindowKeeper
from app.engine.errors import CancelledError, EngineError
from app.engine.options import SchedulerOptions
from app.engine.prompt_cache import PromptCache
from app.engine.slots import Job, Slot, SlotState
from app.engine.speculative import Speculator
from app.engine.stats import StatsRecorder
from app.engine.types import RANDOM_SEED, GenerationRequest, PromptProgress, TokenChunk, banning_end_of_generation

log = logging.getLogger(__name__)


class Admission:
    """Admission's half of ``Scheduler``: the state it shares with the steps is declared here."""

    backend: Backend
    stats: StatsRecorder
    options: SchedulerOptions
    slots: list[Slot]
    pending: deque[Job]
    prompt_cache: PromptCache | None
    speculator: Speculator | None
    windows: WindowKeeper

    @property
    def busy(self) -> bool:
        return any(slot.busy for slot in self.slots)

    # ---- admission -------------------------------------------------------------------------

    def admit(self) -> None:
        if not self.options.cont_batching and self.busy:
            return
        waiting: deque[Job] = deque()
        while self.pending:
            job = self.pending.popleft()
            if job.cancelled:
                for member in job.family:
                    member.emit(CancelledError())
                continue
            slots = self._pick_slots(job)
            if slots is None:
                waiting.append(job)
                if job.request.id_slot < 0:
                    break
                continue
            try:
                self._start(slots[0], job)
                for slot, follower in zip(slots[1:], job.followers, strict=True):
                    self._follow(slot, follower, slots[0])
            except Exception as exc:  # a job that cannot start fails alone
                if isinstance(exc, EngineError):
                    error = exc
                else:
                    log.exception("could not start job %s", job.id)
                    error = EngineError(f"the job could not start: {exc}")
                for slot in slots:
                    if slot.job in job.family:
                        slot.release()
                for member in job.family:
                    member.emit(error)
        waiting.extend(self.pending)
        self.pending = waiting

    def _pick_slots(self, job: Job) -> list[Slot] | None:
        """A slot for the job, and one more for each follower; None until enough are idle. As
        llama-server: the idle slot whose cells hold the largest share of the prompt, if that share
        is over ``-sps``; else the least recently used one."""
        request = job.request
        idle = [slot for slot in self.slots if not slot.busy]
        if len(idle) < 1 + len(job.followers):
            return None
        similar = self._most_similar(idle, job) if request.cache_prompt else None
        if request.id_slot >= 0:
            leader = self.slots[request.id_slot]
            if leader.busy:
                return None
        elif similar is not None:
            leader = similar
        else:
            leader = min(idle, key=lambda slot: slot.last_used)
        others = sorted((slot for slot in idle if slot is not leader), key=lambda slot: slot.last_used)
        return [leader, *others[: len(job.followers)]]

    def _most_similar(self, idle: list[Slot], job: Job) -> Slot | None:
        threshold = self.options.slot_similarity
        if threshold == 0 or not job.request.prompt:
            return None
        shares = [(slot.reusable_prefix(job.request.prompt, job.request.media) / len(job.request.prompt), slot)
                  for slot in idle]
        share, slot = max(shares, key=lambda pair: (pair[0], -pair[1].last_used))
        return slot if share > threshold else None

    def _sampler_for(self, job: Job, slot: Slot) -> object:
        """The job's sampler chain, in the slot's sequence of the model's graph where the job offloads it."""
        return self.backend.new_sampler(banning_end_of_generation(job.request.sampling,
                                                                  self.backend.vocab.eog_tokens()),
                                        slot.id if job.request.offloads_sampling else None)

    def _synthetic_rng(self, request: GenerationRequest) -> random.Random | None:
        """The job's generator for synthetic acceptance, seeded with its seed as in llama-server; None when that
        is off, and for a grammar's job (a kept draft token the grammar never saw could break it)."""
        if self.speculator is None or not self.speculator.synthetic or request.sampling.grammar:
            return None
        seed = request.sampling.seed
        return random.Random(None if seed == RANDOM_SEED else seed)

    def _cache_idle_slots(self, starting: Slot) -> None:
        """llama-server's --cache-idle-slots: when a job starts, the prompts of the idle slots go to
        the prompt cache; with a shared KV cache (-kvu) their cells are freed for the running ones."""
        cache = self.prompt_cache
        if cache is None or not self.options.cache_idle_slots:
            return
        for other in self.slots:
            if other is starting or other.busy or not other.cached or other.offered:
                continue
            cache.keep(other.cached, other.media, functools.partial(self.backend.read_sequence, other.id))
            other.offered = True
            if self.options.kv_unified:
                self.backend.forget(other.id, 0)
                other.cached.clear()
                other.media = []
        self.stats.on_prompt_cache(cache.size_bytes, len(cache))

    def _start(self, slot: Slot, job: Job) -> None:
        request = job.request
        self._cache_idle_slots(slot)
        keep = slot.reusable_prefix(request.prompt, request.media) if request.cache_prompt else 0
        restored = False
        if self.prompt_cache is not None and request.cache_prompt:
            keep, restored = self._use_prompt_cache(slot, job, keep)
        if request.cache_prompt and request.n_cache_reuse > 0 and not slot.media and not request.media:
            keep = self._reuse_chunks(slot, request.prompt, keep, request.n_cache_reuse)
        slot.media = list(request.media)
        keep = self.windows.held_prefix(slot, keep)
        if not self.backend.forget(slot.id, slot.position(keep)):
            keep = 0
        slot.start(job, self._sampler_for(job, slot), keep)  # type: ignore[arg-type]
        self.windows.plan(slot, len(request.prompt), keep)
        slot.synthetic_rng = self._synthetic_rng(request)
        self.stats.on_prompt_start(keep, restored)
        report_progress(slot)

    def _reuse_chunks(self, slot: Slot, prompt: tuple[int, ...], keep: int, least: int) -> int:
        """llama-server's cache reuse: after the common prefix, chunks of at least ``least`` tokens
        that the slot's cells hold further on are moved to where the prompt has them, instead of
        being computed again. The prompt tokens now in the cells."""
        cached = slot.cached
        source = target = keep
        while source < len(cached) and target < len(prompt) - 1:  # the last prompt token is decoded
            matched = 0
            while (source + matched < len(cached) and target + matched < len(prompt) - 1
                   and cached[source + matched] == prompt[target + matched]):
                matched += 1
            if matched < least:
                source += 1
                continue
            if not self.backend.move_cells(slot.id, source, target, matched):
                break
            cached[target:target + matched] = cached[source:source + matched]
            source += matched
            target += matched
        del cached[target:]
        return target

    def _use_prompt_cache(self, slot: Slot, job: Job, keep: int) -> tuple[int, bool]:
        """Before a job overwrites its slot's cells: keep them in the prompt cache, and restore a
        kept state that holds more of the prompt than the slot does. The tokens to keep, and
        whether they were restored."""
        cache = self.prompt_cache
        assert cache is not None
        request = job.request
        found = cache.best(request.prompt, request.media)
        if slot.cached and keep * 2 <= len(slot.cached):
            # the job keeps half or less of what the slot holds: llama-server's f_keep < 0.5, computed in floats
            # as (lcp / n_prompt * n_prompt) / n_cached, so that 24 kept of 48 comes out a hair under half there
            # and is saved; at exactly half the slot's prompt would be lost and decoded again when next asked
            cache.keep(slot.cached, slot.media, lambda: self.backend.read_sequence(slot.id))
        restored = False
        if found is not None and found[1] > keep:
            entry, length = found
            slot.checkpoints.clear()  # they were of the cells this state replaces
            if self.backend.write_sequence(slot.id, entry.state):
                slot.cached = list(entry.tokens)
                slot.media = list(entry.media)
                keep, restored = length, True
            else:
                slot.cached.clear()
                keep = 0
        self.stats.on_prompt_cache(cache.size_bytes, len(cache))
        return keep, restored

    def _follow(self, slot: Slot, job: Job, leader: Slot) -> None:
        slot.start(job, self._sampler_for(job, slot), 0)  # type: ignore[arg-type]
        slot.state = SlotState.FOLLOW
        slot.pending = []
        slot.leader = leader


def report_progress(slot: Slot) -> None:
    """llama-server's prompt progress (``return_progress``): when the prompt starts and after each
    decode that takes part of it; a chunk of no text."""
    job = slot.job
    if job is None or not job.request.return_progress or slot.state is not SlotState.PREFILL:
        return
    progress = PromptProgress(total=slot.n_prompt, cache=slot.cache_n, processed=len(slot.cached),
                              time_ms=int((time.perf_counter() - slot.t_start) * 1000))
    timings = slot.timings(0) if job.request.timings_per_token else None
    job.emit(TokenChunk("", (), 0, slot.id, timings=timings, progress=progress))
