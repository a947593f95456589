"""``--spec-type ngram-map-k`` and ``ngram-map-k4v``: llama.cpp's ``common_ngram_map`` drafters
(common/ngram-map.cpp), no model, one map a slot.

The key is the slot's last ``size_n`` tokens (the sampled one last); it is looked up at its latest earlier
place in the slot's history that still has ``size_m`` tokens after it and the key again after those.

- ``ngram-map-k``: the tokens after that place are the draft.
- ``ngram-map-k4v``: the key must have been met ``min_hits`` times; every earlier place of the key adds its
  following ``size_m`` tokens to the key's values (at most 4 kept); a draft is made only when one value
  was seen at least twice as often as all the others together, and it is again the tokens after the
  latest place.

A draft is as long as the model kept of the last draft made from that value (``size_m`` at first), so a
value the model keeps refusing drafts less. llama.cpp finds the places by scanning the history (with a
hash map to speed it up); here each slot keeps the places of every n-gram in a dict as its history grows.
Either way a draft only changes the speed: the model verifies every token.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

MAX_VALUES = 4  # llama.cpp's COMMON_NGRAM_MAX_VALUES


@dataclass
class _Value:
    start: int  # where this m-gram starts in the history
    seen: int = 0
    accepted: int = 0  # tokens the model kept of the last draft made from it


@dataclass
class _Key:
    seen: int = 0
    scanned: int = 0  # the history's places of the key before this are counted into the values
    values: list[_Value] = field(default_factory=list)


@dataclass
class _SlotMap:
    history: list[int] = field(default_factory=list)
    places: dict[tuple[int, ...], list[int]] = field(default_factory=dict)  # n-gram -> its starts, ascending
    indexed: int = 0  # n-grams starting before this are in ``places``
    keys: dict[tuple[int, ...], _Key] = field(default_factory=dict)
    last_draft: tuple[tuple[int, ...], int] | None = None  # (key, value) of the last draft


class NgramMap:
    def __init__(self, size_n: int = 12, size_m: int = 48, min_hits: int = 1, key_only: bool = True) -> None:
        self.size_n, self.size_m, self.min_hits, self.key_only = size_n, size_m, min_hits, key_only
        self.slots: dict[int, _SlotMap] = {}

    def _slot_map(self, seq: int, history: Sequence[int]) -> _SlotMap:
        """The slot's map, started again when its history is not the one it was built from."""
        slot = self.slots.get(seq)
        known = len(slot.history) if slot is not None else 0
        if slot is None or known > len(history) or list(history[:known]) != slot.history:
            slot = self.slots[seq] = _SlotMap()
        slot.history.extend(history[len(slot.history):])
        n = self.size_n
        for start in range(slot.indexed, len(slot.history) - n + 1):
            slot.places.setdefault(tuple(slot.history[start:start + n]), []).append(start)
        slot.indexed = max(slot.indexed, len(slot.history) - n + 1)
        return slot

    def draft(self, seq: int, history: Sequence[int], last: int, limit: int) -> list[int]:
        n, m = self.size_n, self.size_m
        slot = self._slot_map(seq, history)
        slot.last_draft = None
        tokens = slot.history
        if len(tokens) < 2 * n + m:
            return []
        key = (*tokens[len(tokens) - n + 1:], last)
        places = slot.places.get(key, [])
        before = bisect.bisect_left(places, len(tokens) - n - m - 1)  # room for the m tokens and the key
        match = places[before - 1] if before and places[before - 1] > 0 else 0
        if not match:
            return []
        entry = slot.keys.setdefault(key, _Key(values=[_Value(match + n, accepted=m)] if self.key_only else []))
        entry.seen += 1
        value = 0
        if not self.key_only:
            if entry.seen < self.min_hits:
                return []
            self._count_values(entry, tokens, places, match)
            value = max(range(len(entry.values)), key=lambda index: entry.values[index].seen)
            others = sum(item.seen for index, item in enumerate(entry.values) if index != value)
            if others and entry.values[value].seen < 2 * others:
                return []
        length = min(m, entry.values[value].accepted, limit)
        slot.last_draft = (key, value)
        return tokens[match + n:match + n + length]

    def _count_values(self, entry: _Key, tokens: list[int], places: list[int], match: int) -> None:
        """Every place of the key from where the last count stopped up to ``match`` adds the m-gram after it
        to the key's values (a new one while fewer than 4 are kept)."""
        n, m = self.size_n, self.size_m
        for start in places[bisect.bisect_left(places, entry.scanned):bisect.bisect_right(places, match)]:
            gram = tokens[start + n:start + n + m]
            for item in entry.values:
                if tokens[item.start:item.start + m] == gram:
                    item.seen += 1
                    break
            else:
                if len(entry.values) < MAX_VALUES:
                    entry.values.append(_Value(start + n, seen=1, accepted=m))
        entry.scanned = match + 1

    def accepted(self, seq: int, accepted: int) -> None:
        """How many tokens of the slot's last draft the model kept: its value's next draft is that long."""
        slot = self.slots.get(seq)
        if slot is None or slot.last_draft is None:
            return
        key, value = slot.last_draft
        slot.keys[key].values[value].accepted = accepted
