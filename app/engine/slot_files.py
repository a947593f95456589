"""Saving, restoring and erasing one slot's KV cells (run on the engine thread via
``Engine.control``). A slot that is running a job is refused, not waited for."""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.engine.errors import InvalidJobError, SlotBusyError
from app.engine.scheduler import Scheduler
from app.engine.slots import Slot


@dataclass(frozen=True)
class SlotFileResult:
    n_tokens: int
    n_bytes: int
    ms: float


def _idle_slot(scheduler: Scheduler, slot_id: int) -> Slot:
    slot = scheduler.slots[slot_id]
    if slot.busy:
        raise SlotBusyError(slot_id)
    return slot


def save_slot(scheduler: Scheduler, slot_id: int, path: str) -> SlotFileResult:
    started = time.perf_counter()
    slot = _idle_slot(scheduler, slot_id)
    written = scheduler.backend.save_sequence(slot.id, path, slot.cached)
    return SlotFileResult(len(slot.cached), written, (time.perf_counter() - started) * 1000.0)


def restore_slot(scheduler: Scheduler, slot_id: int, path: str) -> SlotFileResult:
    started = time.perf_counter()
    slot = _idle_slot(scheduler, slot_id)
    loaded = scheduler.backend.load_sequence(slot.id, path)
    if loaded is None:
        slot.cached.clear()
        raise InvalidJobError("Unable to restore slot, no available space in KV cache or invalid slot save file")
    tokens, read = loaded
    slot.cached = tokens
    slot.checkpoints.clear()  # of the cells the file replaced
    slot.offered = False
    return SlotFileResult(len(tokens), read, (time.perf_counter() - started) * 1000.0)


def erase_slot(scheduler: Scheduler, slot_id: int) -> SlotFileResult:
    slot = _idle_slot(scheduler, slot_id)
    erased = len(slot.cached)
    scheduler.backend.forget(slot.id, 0)
    slot.cached.clear()
    return SlotFileResult(erased, 0, 0.0)
