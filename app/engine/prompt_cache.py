"""The prompt cache (``--cache-ram``): KV states of prompts that left their slot, kept in host RAM.

A slot's cells hold one prompt (and its answer). When a job is about to overwrite cells that
another request may want again (a conversation's history, a system prompt), the slot's state is
read out (``llama_state_seq_get_data``) and kept here; when a later job's prompt shares a longer
prefix with a kept state than with its slot, that state is written into the slot
(``llama_state_seq_set_data``) and only the rest of the prompt is decoded. States are kept oldest
first and the oldest go when the byte limit is reached; a state whose tokens are a prefix of a kept
one is not kept twice, and a new state replaces the kept ones it extends. A restored state stays in
the cache, so the same prefix can go to several slots. Engine thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.engine.backend import SequenceState
from app.engine.slots import common_prefix_length, reusable_prefix
from app.engine.types import MediaChunk


@dataclass(frozen=True)
class CachedPrompt:
    tokens: tuple[int, ...]  # what the cells held, media rows as placeholders
    media: tuple[MediaChunk, ...]
    state: SequenceState


class PromptCache:
    def __init__(self, limit_bytes: int | None) -> None:
        """``limit_bytes``: the most the kept states may take; None: no limit."""
        self.limit_bytes = limit_bytes
        self._entries: list[CachedPrompt] = []  # oldest first

    @property
    def size_bytes(self) -> int:
        return sum(entry.state.nbytes for entry in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def best(self, prompt: Sequence[int], media: Sequence[MediaChunk]) -> tuple[CachedPrompt, int] | None:
        """The kept state that holds the longest reusable prefix of ``prompt``, and that prefix."""
        found: tuple[CachedPrompt, int] | None = None
        for entry in self._entries:
            length = reusable_prefix(entry.tokens, prompt, media)
            if length > 0 and (found is None or length > found[1]):
                found = (entry, length)
        if found is not None:  # used: it is the newest now
            self._entries.remove(found[0])
            self._entries.append(found[0])
        return found

    def keep(self, tokens: Sequence[int], media: Sequence[MediaChunk], read: Callable[[], SequenceState]) -> bool:
        """Keep the state of cells holding ``tokens`` (``read`` reads it, only when it is kept): not
        when a kept state already holds them all, nor when it alone is over the limit."""
        if not tokens or any(common_prefix_length(entry.tokens, tokens) == len(tokens) for entry in self._entries):
            return False
        state = read()
        if self.limit_bytes is not None and state.nbytes > self.limit_bytes:
            return False
        self._entries = [entry for entry in self._entries
                         if common_prefix_length(entry.tokens, tokens) < len(entry.tokens)]
        while self._entries and self.limit_bytes is not None and self.size_bytes + state.nbytes > self.limit_bytes:
            self._entries.pop(0)
        self._entries.append(CachedPrompt(tuple(tokens), tuple(media), state))
        return True

    def clear(self) -> None:
        self._entries = []
