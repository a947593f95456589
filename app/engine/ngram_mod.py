"""``--spec-type ngram-mod``: llama.cpp's ``common_ngram_mod`` drafter (common/ngram-mod.cpp and its user in
common/speculative.cpp), no model. One table, shared by every slot, maps each ``n_match`` tokens seen to
the token that followed them last. A slot's draft starts from its last ``n_match`` tokens (the sampled one
last) and follows the table token by token, up to ``n_max``; a draft that ends before ``n_min`` tokens is
none. A slot's tokens go into the table in chunks (once 32 new ones are there). The table is emptied when
it holds more than a quarter of llama.cpp's 4 Mi entries, and when a slot's drafts were mostly refused
(under a quarter taken) five times in a row.

llama.cpp hashes the n-grams into a fixed array, where two n-grams may share an entry; here the table is a
dict, which never confuses two. Either way a draft only changes the speed: the model verifies every token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

TABLE_ENTRIES = 4 * 1024 * 1024  # llama.cpp's table size; more than a quarter of it in use empties it
CHUNK = 32  # new tokens a slot gathers before they go into the table
LOW_ACCEPTANCE = 0.25
LOW_STREAK = 5


@dataclass
class _SlotState:
    fed: int = 0  # the history's n-grams before this position are in the table
    drafted: int = 0  # the length of the slot's last draft
    low: int = 0  # drafts in a row that were mostly refused


@dataclass
class NgramMod:
    n_match: int = 24  # --spec-ngram-mod-n-match
    n_min: int = 48  # --spec-ngram-mod-n-min
    n_max: int = 64  # --spec-ngram-mod-n-max
    table: dict[tuple[int, ...], int] = field(default_factory=dict)
    slots: dict[int, _SlotState] = field(default_factory=dict)

    def draft(self, seq: int, history: Sequence[int], last: int, limit: int) -> list[int]:
        """Up to ``min(limit, n_max)`` tokens after ``history`` and ``last``; [] when fewer than ``n_min``
        (or ``limit``, if smaller) are found."""
        state = self.slots.setdefault(seq, _SlotState())
        state.drafted = 0
        n = self.n_match
        if state.fed > len(history):  # a new job in this slot, with a shorter history
            state.fed = 0
        if len(history) < n:
            return []
        if state.fed + CHUNK < len(history) or state.fed == 0:
            self._feed(history, state.fed)
            state.fed = len(history) - n
        window = [*history[len(history) - n + 1:], last]
        drafted: list[int] = []
        for _ in range(min(self.n_max, limit)):
            token = self.table.get(tuple(window[-n:]))
            if token is None:
                break
            drafted.append(token)
            window.append(token)
        if len(drafted) < min(self.n_min, limit):
            return []
        state.drafted = len(drafted)
        return drafted

    def _feed(self, history: Sequence[int], start: int) -> None:
        n = self.n_match
        for i in range(start, len(history) - n):
            self.table[tuple(history[i:i + n])] = history[i + n]
        if len(self.table) > TABLE_ENTRIES * 0.25:
            self.table.clear()

    def accepted(self, seq: int, accepted: int) -> None:
        """How many tokens of the slot's last draft the model kept."""
        state = self.slots.get(seq)
        if state is None or not state.drafted:
            return
        if accepted / state.drafted < LOW_ACCEPTANCE:
            state.low += 1
            if state.low >= LOW_STREAK:
                self.table.clear()
                state.low, state.fed = 0, 0
        else:
            state.low = 0
