"""Counters the engine keeps for /metrics and /slots; read from any thread as a snapshot."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class EngineStats:
    prompt_tokens_total: int = 0
    prompt_seconds_total: float = 0.0
    tokens_predicted_total: int = 0
    tokens_predicted_seconds_total: float = 0.0
    n_decode_total: int = 0
    n_tokens_max: int = 0
    busy_slots_total: int = 0
    max_sequences_per_decode: int = 0
    requests_processing: int = 0
    requests_deferred: int = 0
    sleeping: bool = False

    @property
    def busy_slots_per_decode(self) -> float:
        return self.busy_slots_total / self.n_decode_total if self.n_decode_total else 0.0

    @property
    def prompt_tokens_per_second(self) -> float:
        if not self.prompt_seconds_total:
            return 0.0
        return self.prompt_tokens_total / self.prompt_seconds_total

    @property
    def predicted_tokens_per_second(self) -> float:
        if not self.tokens_predicted_seconds_total:
            return 0.0
        return self.tokens_predicted_total / self.tokens_predicted_seconds_total


class StatsRecorder:
    """Written by the engine thread only; ``snapshot`` may be called from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = EngineStats()

    def snapshot(self) -> EngineStats:
        with self._lock:
            return self._stats

    def on_decode(self, n_tokens: int, n_sequences: int) -> None:
        with self._lock:
            stats = self._stats
            self._stats = replace(
                stats,
                n_decode_total=stats.n_decode_total + 1,
                n_tokens_max=max(stats.n_tokens_max, n_tokens),
                busy_slots_total=stats.busy_slots_total + n_sequences,
                max_sequences_per_decode=max(stats.max_sequences_per_decode, n_sequences),
            )

    def on_prompt_done(self, n_tokens: int, seconds: float) -> None:
        with self._lock:
            stats = self._stats
            self._stats = replace(
                stats,
                prompt_tokens_total=stats.prompt_tokens_total + n_tokens,
                prompt_seconds_total=stats.prompt_seconds_total + seconds,
            )

    def on_generation_done(self, n_tokens: int, seconds: float) -> None:
        with self._lock:
            stats = self._stats
            self._stats = replace(
                stats,
                tokens_predicted_total=stats.tokens_predicted_total + n_tokens,
                tokens_predicted_seconds_total=stats.tokens_predicted_seconds_total + seconds,
            )

    def on_sleep(self, sleeping: bool) -> None:
        with self._lock:
            self._stats = replace(self._stats, sleeping=sleeping, requests_processing=0)

    def on_load(self, processing: int, deferred: int) -> None:
        with self._lock:
            self._stats = replace(self._stats, requests_processing=processing, requests_deferred=deferred)
