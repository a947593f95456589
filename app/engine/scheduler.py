"""The scheduler: admits jobs into slots and runs one decode step over every live slot.

Each step builds ONE batch: a token for every generating slot (and, with speculative decoding, its
draft after it: app/engine/speculative.py), then prompt chunks of the slots still prefilling, up
to ``n_batch`` tokens in all; then every slot that had an output samples its next token (walking
its draft while the model agrees with it), detokenizes it and checks its stop conditions. A job
with followers (n > 1) takes a slot per completion: the leader decodes the prompt once, its KV cells
are copied to each follower, and every follower samples its first token from the leader's logits.
Runs on the engine thread only.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import replace

from app.engine.admission import Admission, report_progress
from app.engine.backend import Backend, BatchEntry, BatchMedia, BatchToken
from app.engine.checkpoints import WindowKeeper
from app.engine.embedding_batches import run_embedding_decode
from app.engine.errors import CancelledError, DecodeError, EngineError
from app.engine.first_chunks import FirstChunks
from app.engine.options import SchedulerOptions
from app.engine.prompt_cache import PromptCache
from app.engine.slots import ControlJob, EmbedJob, Job, Slot, SlotState
from app.engine.speculative import DraftWant, SpeculationOptions, Speculator
from app.engine.stats import StatsRecorder
from app.engine.synthetic import synthetic_verify
from app.engine.types import Completion, FinishReason, MediaChunk, Sampled

log = logging.getLogger(__name__)


class Scheduler(Admission):
    def __init__(self, backend: Backend, stats: StatsRecorder, options: SchedulerOptions) -> None:
        self.backend = backend
        self.stats = stats
        self.options = options
        self.slots = [Slot(index) for index in range(backend.n_seq)]
        self.pending: deque[Job] = deque()
        self.embeddings: deque[EmbedJob] = deque()
        self.controls: deque[ControlJob] = deque()
        self._lora_turn = 0
        self._decode_seconds = 0.0  # inside llama_decode, this step
        self.prompt_cache = PromptCache(options.prompt_cache_bytes) if options.prompt_cache_bytes != 0 else None
        self.speculator = speculator_for(backend, options.speculation)
        self.windows = WindowKeeper(backend, options.ctx_checkpoints, options.checkpoint_min_step)
        self.first_chunks = FirstChunks(backend.decode_fills_cpu)

    def report_load(self) -> None:
        busy = [slot for slot in self.slots if slot.busy]
        self.stats.on_load(len(busy), len(self.pending), sum(len(slot.cached) for slot in busy),
                           self.backend.n_seq * self.backend.n_ctx_seq)

    # ---- work besides generation ----------------------------------------------------------

    def run_controls(self) -> None:
        while self.controls:
            job = self.controls.popleft()
            try:
                job.outcome.set_result(job.action(self))
            except Exception as exc:
                job.outcome.set_exception(exc)

    def run_embeddings(self) -> None:
        run_embedding_decode(self.embeddings, self.backend, self.stats)

    def end_reasoning(self, completion_id: str) -> tuple[bool, str]:
        """End the thinking of the running completion ``completion_id`` now (its reasoning control):
        (done, why not)."""
        slots = [slot for slot in self.slots if slot.job is not None and completion_id
                 and slot.job.request.completion_id == completion_id]
        if not slots:
            return False, "no active completion for this id"
        gates = [slot.reasoning for slot in slots if slot.reasoning is not None]
        if not gates:
            return False, "reasoning control not enabled for this completion"
        for gate in gates:
            gate.end_now()
        return True, ""

    # ---- one step --------------------------------------------------------------------------

    def _lora_group(self) -> tuple[float, ...] | None:
        """Adapter scales apply to a whole decode: each step serves the slots of one setting,
        taking the settings in turn when running jobs differ."""
        settings: list[tuple[float, ...] | None] = []
        for slot in self.slots:
            if slot.job is not None and slot.state is not SlotState.FOLLOW:
                lora = slot.job.request.lora
                if lora not in settings:
                    settings.append(lora)
        if not settings:
            return None
        self._lora_turn += 1
        return settings[self._lora_turn % len(settings)]

    def _whole_media(self, chunk: MediaChunk) -> bool:
        media = self.backend.media
        return media is not None and media.whole(chunk)

    def step(self) -> float:
        """One decode step (media rows first: several decodes); the seconds inside llama_decode (``on_step``)."""
        self._decode_seconds = 0.0
        self._step()
        return self._decode_seconds

    def _step(self) -> None:
        self._drop_cancelled()
        self.first_chunks.wait_for_readers()
        lora = self._lora_group()
        members = {slot.id for slot in self.slots if slot.job is not None and slot.job.request.lora == lora}
        for slot in self.slots:  # a chunk that needs non-causal attention takes a decode of its own
            chunk = slot.next_whole_media(self._whole_media) if slot.state is SlotState.PREFILL else None
            if chunk is not None and slot.id in members:
                alone = slot.take_whole_media(chunk)
                self.backend.set_lora(lora or ())
                self._decode([alone], [(slot, chunk.n_tokens - 1)] if alone.logits else [])
                return
        tokens: list[BatchEntry] = []
        media: list[BatchEntry] = []
        token_outputs: list[tuple[Slot, int]] = []
        media_outputs: list[tuple[Slot, int]] = []
        generating = [slot for slot in self.slots if slot.id in members and slot.state is SlotState.GENERATE]
        drafts = self._drafts(generating)
        for slot in generating:
            token_outputs.append((slot, len(tokens)))
            slot.draft = drafts.get(slot.id, [])
            for token in (slot.next_token, *slot.draft):
                tokens.append(BatchToken(token, slot.position(len(slot.cached)), slot.id, True))
                slot.cached.append(token)
        for slot in self.slots:
            room = self.backend.n_batch - len(tokens) - _rows(media)
            if room <= 0:
                break
            if slot.state is not SlotState.PREFILL or slot.id not in members:
                continue
            entries = slot.take_prefill(self.windows.room(slot, room), self._whole_media)
            if not entries:
                continue
            if not slot.pending:
                entries[-1] = replace(entries[-1], logits=True)
            for entry in entries:
                batch, outputs = (media, media_outputs) if isinstance(entry, BatchMedia) else (tokens, token_outputs)
                batch.append(entry)
                if entry.logits:
                    outputs.append((slot, _rows(batch) - 1))
        if not tokens and not media:
            return
        self.backend.set_lora(lora or ())
        if media:  # this llama.cpp decodes embeddings and tokens apart: a slot's media rows come first
            self._decode(media, media_outputs)
        if tokens:
            self._decode(tokens, token_outputs)

    def _drafts(self, generating: list[Slot]) -> dict[int, list[int]]:
        """This step's draft for each generating slot that speculates: what fits its context, its
        n_predict and this step's batch (a token for every generating slot comes first)."""
        if self.speculator is None or not generating:
            return {}
        share = (self.backend.n_batch - len(generating)) // len(generating)  # of the batch, per slot
        wants: list[DraftWant] = []
        for slot in generating:
            assert slot.job is not None and slot.generation is not None
            request = slot.job.request
            if slot.media:  # a draft cannot see an image's rows
                continue
            room = slot.sampler.draft_room if slot.sampler is not None else None  # a chain in the graph's bound
            limit = min(self.backend.n_ctx_seq - len(slot.cached) - 2, share, share if room is None else room)
            if request.n_predict >= 0:
                limit = min(limit, request.n_predict - len(slot.generation.tokens) - 1)
            if limit > 0:
                wants.append(DraftWant(slot.id, slot.cached, slot.next_token, limit, request.speculative))
        return self.speculator.drafts(wants) if wants else {}

    def _decode(self, batch: list[BatchEntry], outputs: list[tuple[Slot, int]]) -> None:
        """Decode and sample. If the decode fails for a batch of several sequences, each sequence
        is tried again on its own (llama.cpp rolls back a failed decode), so a failure stays with
        the job it belongs to and the others go on."""
        in_batch = {entry.seq for entry in batch}
        started = time.perf_counter()
        try:
            self.backend.decode(batch)
        except DecodeError as exc:
            if len(in_batch) == 1:
                log.error("llama_decode failed (%s) for slot %s", exc.code, next(iter(in_batch)))
                for slot in self.slots:
                    if slot.job is not None and (slot.id in in_batch or (slot.leader is not None and
                                                 slot.leader.id in in_batch)):
                        self._fail(slot, exc)
                return
            log.warning("llama_decode failed (%s) for slots %s: retrying them one by one", exc.code,
                        sorted(in_batch))
            for seq in sorted(in_batch):
                sub = [entry for entry in batch if entry.seq == seq]
                owner = next(slot for slot in self.slots if slot.id == seq)
                if owner.state is SlotState.GENERATE:  # its token (and draft) only
                    self._decode(sub, [(owner, 0)])
                else:
                    self._decode(sub, [(owner, _rows(sub) - 1)] if sub[-1].logits else [])
            return
        self._decode_seconds += time.perf_counter() - started
        self.stats.on_decode(_rows(batch), len(in_batch))
        for slot in self.slots:
            if slot.id in in_batch and slot.state is SlotState.PREFILL and slot.job is not None:
                self.windows.after_decode(slot, slot.job.id)
                report_progress(slot)
        for slot, index in outputs:
            if slot.state is SlotState.PREFILL:
                self._prompt_done(slot, index)
            else:
                self._take_tokens(slot, index)

    def _drop_cancelled(self) -> None:
        for slot, job in ((slot, slot.job) for slot in self.slots if slot.job is not None):
            if job.cancelled or (slot.state is SlotState.FOLLOW and (slot.leader is None or slot.leader.job is None)):
                slot.release()
                job.emit(CancelledError())

    def _prompt_done(self, slot: Slot, index: int) -> None:
        assert slot.job is not None
        now = time.perf_counter()
        followers = [s for s in self.slots if s.state is SlotState.FOLLOW and s.leader is slot]
        for member in (slot, *followers):
            member.state = SlotState.GENERATE
            member.t_prompt_done = now
        self.stats.on_prompt_done(slot.n_prompt - slot.cache_n, now - slot.t_start)
        for follower in followers:
            self.backend.copy_sequence(slot.id, follower.id)
            follower.cached = list(slot.cached)
            follower.checkpoints.clear()
            follower.cache_n = slot.n_prompt
            follower.leader = None
        for member in (slot, *followers):
            if member.job is not None and member.job.request.n_predict == 0:
                self._finish(member, FinishReason.LIMIT, None)
            else:
                self._take_tokens(member, index)

    def _take_tokens(self, slot: Slot, index: int) -> None:
        """The tokens a generating slot's decode gives: the one sampled at ``index`` and, while each
        equals the slot's draft token there, the next from that draft token's logits. The cells of
        the draft tokens that were not taken are dropped."""
        draft, slot.draft = slot.draft, []
        synthetic = self.speculator.synthetic if self.speculator is not None and draft else ()
        if synthetic and slot.synthetic_rng is not None:
            produced = synthetic_verify(draft, synthetic, slot.synthetic_rng,
                                        lambda offset: self._next_token(slot, index + offset),
                                        self.backend.vocab.is_eog)
        else:
            produced = [self._next_token(slot, index)]
            while len(produced) <= len(draft) and produced[-1].token == draft[len(produced) - 1]:
                produced.append(self._next_token(slot, index + len(produced)))
        if draft:
            accepted = len(produced) - 1
            if accepted < len(draft):
                del slot.cached[len(slot.cached) - (len(draft) - accepted):]
                self.backend.forget(slot.id, slot.position(len(slot.cached)))
            slot.draft_n += len(draft)
            slot.draft_accepted += accepted
            self.stats.on_speculation(len(draft), accepted)
            if self.speculator is not None:
                self.speculator.accepted(slot.id, accepted)
        for sampled in produced:
            if not self._take_token(slot, sampled):
                return

    def _next_token(self, slot: Slot, index: int) -> Sampled:
        """The token at batch entry ``index``: the reasoning budget's forced one, or sampled."""
        assert slot.sampler is not None
        forced = slot.reasoning.forced() if slot.reasoning is not None else None
        if forced is not None:  # the end of the thinking, going in (the reasoning budget)
            slot.sampler.accept(forced)
            sampled = Sampled(forced)
        else:
            sampled = slot.sampler.sample(index)
        if slot.reasoning is not None:
            slot.reasoning.feed(sampled.token)
        return sampled

    def _take_token(self, slot: Slot, sampled: Sampled) -> bool:
        """One generated token: its text, the stop conditions, the chunk out. Whether the job goes on."""
        assert slot.job is not None and slot.generation is not None
        request = slot.job.request
        token = sampled.token
        slot.t_last = time.perf_counter()
        if self.backend.vocab.is_eog(token) and not request.sampling.ignore_eos:
            self._finish(slot, FinishReason.EOS, None)
            return False
        slot.next_token = token
        elapsed_ms = (slot.t_last - slot.t_prompt_done) * 1000.0
        piece = self.backend.vocab.piece(token, self.options.special_output or token in request.preserved_tokens)
        outcome = slot.generation.add(token, piece, sampled.probs, elapsed_ms)
        if outcome.finish is not None:
            self._finish(slot, outcome.finish, outcome.stop_word)
            return False
        if len(slot.cached) + 1 >= self.backend.n_ctx_seq and not self._shift_context(slot):
            self._finish(slot, FinishReason.LIMIT, None, truncated=True)
            return False
        if request.deadline is not None and slot.t_last >= request.deadline:
            self._finish(slot, FinishReason.LIMIT, None, deadline=True)
            return False
        chunk = slot.generation.chunk(slot.id)
        if chunk is not None:
            if request.timings_per_token:
                chunk = replace(chunk, timings=slot.timings(len(slot.generation.tokens)))
            self.first_chunks.before_emit(slot.job)
            slot.job.emit(chunk)
        return True

    def _shift_context(self, slot: Slot) -> bool:
        """llama-server's context shift: keep the first ``n_keep`` prompt tokens (and the BOS), drop
        ``n_discard`` after them (default: half of the rest) and go on. Not for media in the cells."""
        if not self.options.context_shift or slot.media or slot.job is None:
            return False
        request = slot.job.request
        n_keep = (slot.n_prompt if request.n_keep < 0 else request.n_keep) + int(self.backend.info.add_bos)
        n_keep = min(self.backend.n_ctx_seq - 4, n_keep)
        n_left = len(slot.cached) - n_keep
        n_discard = max(0, min(request.n_discard or n_left // 2, n_left - 1))
        if n_discard == 0 or not self.backend.shift_sequence(slot.id, n_keep, n_discard):
            return False
        del slot.cached[n_keep:n_keep + n_discard]
        slot.shifted = True
        return True

    def _finish(self, slot: Slot, reason: FinishReason, stop_word: str | None, truncated: bool = False,
                deadline: bool = False) -> None:
        assert slot.job is not None and slot.generation is not None
        generation = slot.generation
        timings = slot.timings(len(generation.tokens))
        chunk = generation.chunk(slot.id, final=True)
        if chunk is not None:
            slot.job.emit(replace(chunk, timings=timings) if slot.job.request.timings_per_token else chunk)
        self.stats.on_generation_done(len(generation.tokens), timings.predicted_ms / 1000.0)
        job = slot.job
        completion = Completion(
            text=generation.text,
            tokens=tuple(generation.tokens),
            finish=reason,
            stopping_word=stop_word or "",
            truncated=truncated or slot.shifted,
            n_prompt=slot.n_prompt,
            n_cached_after=len(slot.cached),
            id_slot=slot.id,
            timings=timings,
            probs=tuple(generation.probs),
            deadline_exceeded=deadline,
        )
        slot.release()  # before the answer goes out, so /slots never shows a finished job as running
        job.emit(completion)

    def _fail(self, slot: Slot, error: EngineError) -> None:
        job = slot.job
        self.backend.forget(slot.id, 0)
        slot.cached.clear()
        slot.release()
        if job is not None:
            job.emit(error)

    def fail_running(self, error: EngineError) -> None:
        for slot in self.slots:
            if slot.job is not None:
                self._fail(slot, error)

    def fail_everything(self, error: EngineError) -> None:
        for slot in self.slots:
            job = slot.job
            if job is not None:
                slot.release()
                job.emit(error)
        for job in self.pending:
            for member in job.family:
                member.emit(error)
        self.pending.clear()
        for embed in self.embeddings:
            embed.outcome.set_exception(error)
        for control in self.controls:
            control.outcome.set_exception(error)
        self.embeddings.clear()
        self.controls.clear()


def speculator_for(backend: Backend, options: SpeculationOptions) -> Speculator | None:
    """The drafters ``options`` ask for, or None (off, or a model whose cells cannot be rewound)."""
    if not options.enabled:
        return None
    if not backend.can_rewind:
        log.warning("speculative decoding is off: this model's cells cannot drop rejected draft tokens "
                    "(a recurrent or hybrid model)")
        return None
    return Speculator(options, backend.draft, backend.info.n_vocab)


def _rows(batch: list[BatchEntry]) -> int:
    """The places a batch takes in a decode: a token each, a media entry its rows."""
    return sum(entry.count if isinstance(entry, BatchMedia) else 1 for entry in batch)
