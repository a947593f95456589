"""Context checkpoints (``--ctx-checkpoints``, ``--checkpoint-min-step``), as llama-server keeps them: for a
model with sliding-window attention (Gemma 3, gpt-oss, ...), llama.cpp keeps a sequence's SWA cells only
for its last positions (the window and a batch), so a slot's cells can serve a prompt that shares a prefix
with them only while the window before that prefix's end is still held. When it is not, the prefix would
be attended to with holes: the prompt is decoded again from a checkpoint, a copy of the sequence's SWA
cells (llama.cpp's partial state) taken as the prompt was decoded, or from its start if none fits.

A slot takes its checkpoints a few tokens before the end of each prompt (``4 + n_ubatch`` and ``4``
tokens before, llama-server's offsets), where the next turn of a conversation still agrees with it; it
keeps at most ``limit`` of them, dropping first those within ``min_step`` tokens of an earlier one (its
own job's aside), then the oldest.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.engine.backend import Backend, SequenceState

if TYPE_CHECKING:
    from app.engine.slots import Slot

log = logging.getLogger(__name__)

END_OFFSET = 4  # tokens before a prompt's end (and this plus n_ubatch)


@dataclass(frozen=True)
class Checkpoint:
    n_tokens: int  # the slot's cells when it was taken (tokens, not positions)
    pos_min: int  # the sequence's lowest and highest position held then
    pos_max: int
    state: SequenceState  # the SWA cells (llama_state_seq_get_data_ext, partial only)
    job_id: int  # the job that took it


def stops(n_prompt: int, n_ubatch: int, n_batch: int) -> tuple[int, ...]:
    """Where a prompt's decode pauses for a checkpoint: llama-server's ``4 + n_ubatch`` and ``4`` tokens
    before its end (each at most ``n_batch`` before it), the ones inside the prompt, ascending."""
    offsets = (min(n_batch, END_OFFSET + n_ubatch), min(n_batch, END_OFFSET))
    return tuple(sorted({n_prompt - offset for offset in offsets if n_prompt - offset > 0}))


@dataclass
class SlotCheckpoints:
    """One slot's checkpoints, oldest first."""

    items: list[Checkpoint] = field(default_factory=list)

    def add(self, checkpoint: Checkpoint, limit: int, min_step: int) -> None:
        """Keep ``checkpoint`` (replacing one taken at the same point), within ``limit``: while full, those
        within ``min_step`` tokens of the one before them (not of its own job) go first, then the oldest."""
        if limit <= 0:
            self.items = []
            return
        items = [item for item in self.items if item.n_tokens != checkpoint.n_tokens]
        kept: list[Checkpoint] = []
        last = -1
        for index, item in enumerate(items):
            full = len(kept) + (len(items) - index) + 1 > limit
            if full and min_step > 0 and item.job_id != checkpoint.job_id and last >= 0 \
                    and item.n_tokens <= last + min_step:
                continue
            kept.append(item)
            last = item.n_tokens
        while len(kept) + 1 > limit:
            kept.pop(0)
        self.items = [*kept, checkpoint]

    def usable(self, pos_next: int, threshold: int) -> Checkpoint | None:
        """The latest checkpoint that ends at or before ``pos_next`` and holds the window before it
        (its lowest position under ``threshold``, or 0), as llama-server's search."""
        for item in reversed(self.items):
            if item.pos_max <= pos_next and (item.pos_min < threshold or item.pos_min == 0):
                return item
        return None

    def drop_after(self, pos_next: int) -> None:
        """Checkpoints past the point the slot's cells now end at are no longer the slot's."""
        self.items = [item for item in self.items if item.pos_max <= pos_next]

    def clear(self) -> None:
        self.items = []


class WindowKeeper:
    """What a scheduler does with checkpoints, for a backend with a sliding window (``n_swa`` > 0; with none,
    every call is a no-op): the prefix a job may keep, its prefill's stops, the checkpoints it takes."""

    def __init__(self, backend: Backend, limit: int, min_step: int) -> None:
        self.backend = backend
        self.limit = limit
        self.min_step = min_step

    @property
    def active(self) -> bool:
        return self.backend.n_swa > 0

    def held_prefix(self, slot: Slot, keep: int) -> int:
        """How much of the ``keep`` tokens the slot's cells hold can serve, asked before the cells after them
        are dropped (that would drop the window cells too): all while the window before their end is held;
        else up to the latest checkpoint that holds it (restored), or nothing. The slot's checkpoints past the
        point kept are dropped."""
        n_swa = self.backend.n_swa
        if n_swa <= 0:
            return keep
        if keep <= 0:
            slot.checkpoints.clear()
            return 0
        pos_next = slot.position(keep)
        threshold = max(0, pos_next - n_swa)
        pos_min = self.backend.pos_min(slot.id)
        if pos_min < 0 or pos_min >= threshold:  # the window before the prefix's end was pruned
            found = slot.checkpoints.usable(pos_next, threshold) if self.limit > 0 else None
            if found is not None and self.backend.write_window(slot.id, found.state):
                pos_next = min(pos_next, max(found.pos_min + 1, found.pos_max))
                keep = min(keep, found.n_tokens, pos_next if not slot.media else keep)
            else:
                keep, pos_next = 0, 0
        slot.checkpoints.drop_after(pos_next)
        return keep

    def plan(self, slot: Slot, n_prompt: int, keep: int) -> None:
        """The points the job's prefill stops at, to take a checkpoint there."""
        slot.checkpoint_stops = [stop for stop in stops(n_prompt, self.backend.n_ubatch, self.backend.n_batch)
                                 if stop > keep] if self.active and self.limit > 0 else []

    def room(self, slot: Slot, room: int) -> int:
        """``room`` held so that this step's prefill of ``slot`` ends at its next stop."""
        ahead = [stop - len(slot.cached) for stop in slot.checkpoint_stops if stop > len(slot.cached)]
        return min(room, *ahead) if ahead else room

    def after_decode(self, slot: Slot, job_id: int) -> None:
        """At a stop: a checkpoint of the slot's window cells."""
        n_tokens = len(slot.cached)
        if n_tokens not in slot.checkpoint_stops:
            return
        slot.checkpoint_stops.remove(n_tokens)
        pos_min, pos_max = self.backend.pos_min(slot.id), self.backend.pos_max(slot.id)
        if pos_min < 0:
            return
        slot.checkpoints.add(Checkpoint(n_tokens, pos_min, pos_max, self.backend.read_window(slot.id), job_id),
                             self.limit, self.min_step)
        log.debug("slot %s: context checkpoint at %s tokens (positions %s-%s, %s bytes)", slot.id, n_tokens,
                  pos_min, pos_max, slot.checkpoints.items[-1].state.nbytes)
