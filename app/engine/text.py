"""Turning sampled tokens into text: UTF-8-safe incremental decoding and stop strings."""

from __future__ import annotations

import codecs
from dataclasses import dataclass


class Utf8Stream:
    """Decodes token pieces incrementally; a partial UTF-8 sequence waits for its next bytes.
    Bytes that can never be UTF-8 become U+FFFD as they come. It is never flushed: a character
    that the end of generation cuts in two is dropped from the text (its bytes stay in the token
    ids), not sent as U+FFFD."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        return self._decoder.decode(piece)



@dataclass(frozen=True)
class StopScan:
    """Result of scanning generated text: how much may be sent, and the stop string hit, if any."""

    safe_end: int
    stop_word: str | None


def partial_stop_length(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
    best = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:size]):
                best = size
                break
    return best


def scan_for_stop(text: str, searched_from: int, stops: tuple[str, ...]) -> StopScan:
    """Find the earliest stop string in ``text`` that ends after ``searched_from``.

    With a hit, ``safe_end`` is where the stop string starts (the text is cut there). Without one,
    ``safe_end`` excludes a trailing partial match, which must be held back while streaming.
    """
    hit_at = -1
    hit_word: str | None = None
    for stop in stops:
        if not stop:
            continue
        start = max(0, searched_from - len(stop) + 1)
        found = text.find(stop, start)
        if found != -1 and (hit_at == -1 or found < hit_at):
            hit_at, hit_word = found, stop
    if hit_word is not None:
        return StopScan(hit_at, hit_word)
    return StopScan(len(text) - partial_stop_length(text, stops), None)
