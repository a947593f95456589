"""``--spec-type ngram-cache``: llama.cpp's lookup decoding (common/ngram-cache.cpp and its user in
common/speculative.cpp), no model. Three tables map an n-gram (1 to 4 tokens) to the tokens that followed
it and how often:

- the context cache, one a slot, filled from that slot's own tokens as they come;
- the dynamic cache (``--lookup-cache-dynamic``) and the static cache (``--lookup-cache-static``), read
  once from files that llama.cpp's ``llama-lookup-create``/``llama-lookup`` write (or ``save``, here),
  shared by every slot and never written by the server (llama-server does not save them either).

A draft grows a token at a time, up to 8 (llama-server's fixed ``n_draft``): the longest n-gram of the
context cache whose most frequent follower is frequent enough (lax thresholds), else the dynamic cache's
(strict thresholds), both weighted by the static cache's counts after the last 2 tokens; else the static
cache alone. The context cache counts every n-gram of the slot's tokens, as llama.cpp's ``llama-lookup``
does (llama-server's copy counts only those inside each batch of new tokens, so it learns little from
generated text); a slot whose history shrinks (a new job) starts a new one.

The file holds, for each n-gram: its 4 token ids (int32, -1 past its length), the number of followers
(int32), then each follower's id and count (int32 each), little-endian as llama.cpp writes them on x86.
Ties between followers may break differently from llama.cpp's unordered maps; a draft only changes the
speed, the model verifies every token.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.engine.errors import ModelLoadError

log = logging.getLogger(__name__)

NGRAM_MIN, NGRAM_MAX, NGRAM_STATIC = 1, 4, 2  # llama.cpp's LLAMA_NGRAM_MIN/MAX/STATIC
N_DRAFT = 8  # llama-server's ngram-cache draft length (fixed there)
TOKEN_NULL = -1
# (minimum sample size, minimum percent) per n-gram length, for the context (lax) and dynamic (strict) caches
LAX = ((2, 66), (2, 50), (1, 50), (1, 50))
STRICT = ((4, 75), (3, 66), (2, 66), (2, 66))

Ngram = tuple[int, int, int, int]
Cache = dict[Ngram, dict[int, int]]

_NGRAM = struct.Struct("<4i")
_INT = struct.Struct("<i")
_PAIR = struct.Struct("<2i")


class LookupCacheError(ModelLoadError):
    """A lookup cache file that cannot be read; the message names it."""


def ngram(tokens: Sequence[int]) -> Ngram:
    padded = [*tokens, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL, TOKEN_NULL][:NGRAM_MAX]
    return padded[0], padded[1], padded[2], padded[3]


def update(cache: Cache, tokens: Sequence[int], new: int) -> None:
    """llama.cpp's ``common_ngram_cache_update``: count, for the last ``new`` positions of ``tokens``, the
    token after each n-gram of 1 to 4 tokens that ends right before it."""
    size = len(tokens)
    for length in range(NGRAM_MIN, NGRAM_MAX + 1):
        for i in range(max(size - new, length), size):
            followers = cache.setdefault(ngram(tokens[i - length:i]), {})
            followers[tokens[i]] = followers.get(tokens[i], 0) + 1


def _static_draft(static: Cache, key: Ngram) -> int:
    followers = static.get(key)
    if not followers:
        return TOKEN_NULL
    best, best_count = max(followers.items(), key=lambda item: item[1])
    total = sum(followers.values())
    sample, percent = LAX[NGRAM_STATIC - 1]
    if total < sample or 100 * best_count < percent * total:
        return TOKEN_NULL
    return best


def _primary_draft(primary: Cache, keys: Sequence[Ngram], static_part: dict[int, int],
                   thresholds: tuple[tuple[int, int], ...]) -> int:
    """The longest n-gram's best follower, each weighted by the static cache (100 x its count, else 1)."""
    for index in range(len(keys) - 1, -1, -1):
        followers = primary.get(keys[index])
        if not followers:
            continue
        best, best_count, best_weight, total = TOKEN_NULL, 0, 0, 0
        for token, count in followers.items():
            weight = 100 * static_part[token] if token in static_part else 1
            if count * weight > best_count * best_weight:
                best, best_count, best_weight = token, count, weight
            total += count
        sample, percent = thresholds[index]
        if total < sample or 100 * best_count < percent * total:
            continue
        return best
    return TOKEN_NULL


def draft(tokens: Sequence[int], n_draft: int, context: Cache, dynamic: Cache, static: Cache) -> list[int]:
    """llama.cpp's ``common_ngram_cache_draft`` after ``tokens`` (the last one the token just sampled)."""
    if len(tokens) < NGRAM_STATIC:
        return []
    sequence = list(tokens[-NGRAM_MAX:])
    drafted: list[int] = []
    while len(drafted) < n_draft:
        static_part = static.get(ngram(sequence[-NGRAM_STATIC:]), {})
        keys = [ngram(sequence[-length:]) for length in range(NGRAM_MIN, NGRAM_MAX + 1)]
        token = _primary_draft(context, keys, static_part, LAX)
        if token == TOKEN_NULL:
            token = _primary_draft(dynamic, keys, static_part, STRICT)
        if token == TOKEN_NULL:
            token = _static_draft(static, keys[NGRAM_STATIC - 1])
        if token == TOKEN_NULL:
            break
        drafted.append(token)
        sequence.append(token)
    return drafted


def load(path: str) -> Cache:
    """A lookup cache file, as llama.cpp's ``common_ngram_cache_load`` reads it."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise LookupCacheError(f"cannot read the lookup cache {path}: {exc.strerror}") from None
    cache: Cache = {}
    offset, end = 0, len(data)
    try:
        while offset < end:
            key = _NGRAM.unpack_from(data, offset)
            (count,) = _INT.unpack_from(data, offset + _NGRAM.size)
            offset += _NGRAM.size + _INT.size
            if count <= 0:
                raise LookupCacheError(f"{path}: an n-gram with {count} followers at byte {offset}")
            followers = cache.setdefault(key, {})
            for _ in range(count):
                token, times = _PAIR.unpack_from(data, offset)
                offset += _PAIR.size
                if times <= 0:
                    raise LookupCacheError(f"{path}: a follower counted {times} times at byte {offset}")
                followers[token] = times
    except struct.error:
        raise LookupCacheError(f"{path}: not a lookup cache (it ends inside an entry)") from None
    return cache


def save(cache: Cache, path: str) -> None:
    """``cache`` in llama.cpp's file format (``common_ngram_cache_save``)."""
    chunks: list[bytes] = []
    for key, followers in cache.items():
        chunks.append(_NGRAM.pack(*key) + _INT.pack(len(followers)))
        chunks.extend(_PAIR.pack(token, count) for token, count in followers.items())
    Path(path).write_bytes(b"".join(chunks))


@dataclass
class _SlotCache:
    size: int = 0  # the slot's tokens counted so far
    context: Cache = field(default_factory=dict)


@dataclass
class NgramCache:
    """The ngram-cache drafter: a context cache a slot, the two files' caches shared."""

    static: Cache = field(default_factory=dict)
    dynamic: Cache = field(default_factory=dict)
    n_draft: int = N_DRAFT
    slots: dict[int, _SlotCache] = field(default_factory=dict)

    @classmethod
    def from_files(cls, static_path: str | None, dynamic_path: str | None) -> NgramCache:
        drafter = cls(static=load(static_path) if static_path else {},
                      dynamic=load(dynamic_path) if dynamic_path else {})
        for kind, path, cache in (("static", static_path, drafter.static), ("dynamic", dynamic_path, drafter.dynamic)):
            if path:
                log.info("ngram-cache: the %s lookup cache %s holds %d n-grams", kind, path, len(cache))
        return drafter

    def draft(self, seq: int, history: Sequence[int], last: int, limit: int) -> list[int]:
        state = self.slots.setdefault(seq, _SlotCache())
        size = len(history) + 1  # the history and the token just sampled
        if state.size > size:  # a new job in this slot
            self.slots[seq] = state = _SlotCache()
        if state.size < size:  # the new tokens, with the n-grams before them (not the whole history each step)
            start = max(0, state.size - NGRAM_MAX)
            update(state.context, [*history[start:], last], size - state.size)
            state.size = size
        return draft([*history[-NGRAM_MAX:], last], min(self.n_draft, limit), state.context, self.dynamic,
                     self.static)

    def accepted(self, seq: int, accepted: int) -> None:
        """Nothing to learn from it (llama.cpp's ngram-cache neither)."""
