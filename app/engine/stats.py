"""Counters the engine keeps for /metrics and /slots; read from any thread as a snapshot."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

# vLLM's buckets, so dashboards and autoscaling built for it read these unchanged.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
# the engine thread's own time per step (outside llama_decode): tens of microseconds to milliseconds
STEP_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)


@dataclass(frozen=True)
class Histogram:
    """Observations counted per bucket (``counts[i]``: values up to ``bounds[i]``, the last one
    beyond every bound), with their sum."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...] = ()
    total: float = 0.0

    def observe(self, value: float) -> Histogram:
        counts = list(self.counts or (0,) * (len(self.bounds) + 1))
        counts[next((i for i, bound in enumerate(self.bounds) if value <= bound), len(self.bounds))] += 1
        return replace(self, counts=tuple(counts), total=self.total + value)

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus' buckets: (upper bound, observations up to it), ``+Inf`` last."""
        counts = self.counts or (0,) * (len(self.bounds) + 1)
        running, buckets = 0, []
        for bound, count in zip([*map(str, self.bounds), "+Inf"], counts, strict=True):
            running += count
            buckets.append((bound, running))
        return buckets


@dataclass(frozen=True)
class EngineStats:
    prompt_tokens_total: int = 0
    prompt_seconds_total: float = 0.0
    tokens_predicted_total: int = 0
    tokens_predicted_seconds_total: float = 0.0
    # decode steps those tokens took: each generation's first token comes from its prompt's last
    # batch, at no step of its own (llama-server's n_gen_steps), so the rate counts one fewer
    tokens_predicted_steps_total: int = 0
    n_decode_total: int = 0
    n_tokens_max: int = 0
    busy_slots_total: int = 0
    max_sequences_per_decode: int = 0
    requests_processing: int = 0
    requests_deferred: int = 0
    sleeping: bool = False
    prompt_tokens_cached_total: int = 0  # prompt tokens jobs found in their slot's cells (restored ones included)
    prompt_cache_restores_total: int = 0  # states written into a slot from the prompt cache
    prompt_cache_bytes: int = 0
    prompt_cache_prompts: int = 0
    kv_cells_used: int = 0  # cells held by the slots that are working
    kv_cells_total: int = 0
    time_to_first_token: Histogram = Histogram(TTFT_BUCKETS)
    time_per_output_token: Histogram = Histogram(TPOT_BUCKETS)
    step_host_seconds: Histogram = Histogram(STEP_BUCKETS)  # per decode step, outside llama_decode
    draft_tokens_total: int = 0  # speculative decoding: draft tokens verified
    draft_accepted_total: int = 0  # ... kept
    drafts_total: int = 0  # ... drafts verified
    accepted_per_position: tuple[int, ...] = ()  # drafts whose token at each position was kept

    def since(self, earlier: EngineStats) -> EngineStats:
        """These stats with the prompt and generation counters of the time since ``earlier`` only."""
        return replace(self, prompt_tokens_total=self.prompt_tokens_total - earlier.prompt_tokens_total,
                       prompt_seconds_total=self.prompt_seconds_total - earlier.prompt_seconds_total,
                       tokens_predicted_total=self.tokens_predicted_total - earlier.tokens_predicted_total,
                       tokens_predicted_seconds_total=(self.tokens_predicted_seconds_total
                                                       - earlier.tokens_predicted_seconds_total),
                       tokens_predicted_steps_total=(self.tokens_predicted_steps_total
                                                     - earlier.tokens_predicted_steps_total))

    @property
    def kv_usage(self) -> float:
        """The share of KV cells in use, 0 to 1 (vLLM's gpu_cache_usage_perc)."""
        return self.kv_cells_used / self.kv_cells_total if self.kv_cells_total else 0.0

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
        return self.tokens_predicted_steps_total / self.tokens_predicted_seconds_total


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

    def on_step(self, host_seconds: float) -> None:
        """A decode step done: the seconds the engine thread spent outside llama_decode."""
        with self._lock:
            self._stats = replace(self._stats, step_host_seconds=self._stats.step_host_seconds.observe(host_seconds))

    def on_speculation(self, drafted: int, accepted: int) -> None:
        """A draft of ``drafted`` tokens verified, its first ``accepted`` kept."""
        with self._lock:
            stats = self._stats
            positions = list(stats.accepted_per_position)
            positions.extend([0] * (drafted - len(positions)))
            for position in range(accepted):
                positions[position] += 1
            self._stats = replace(stats, draft_tokens_total=stats.draft_tokens_total + drafted,
                                  draft_accepted_total=stats.draft_accepted_total + accepted,
                                  drafts_total=stats.drafts_total + 1, accepted_per_position=tuple(positions))

    def on_prompt_done(self, n_tokens: int, seconds: float) -> None:
        """A prompt is decoded, ``seconds`` after its job got a slot: its first token is next."""
        with self._lock:
            stats = self._stats
            self._stats = replace(
                stats,
                prompt_tokens_total=stats.prompt_tokens_total + n_tokens,
                prompt_seconds_total=stats.prompt_seconds_total + seconds,
                time_to_first_token=stats.time_to_first_token.observe(seconds),
            )

    def on_generation_done(self, n_tokens: int, seconds: float) -> None:
        with self._lock:
            stats = self._stats
            per_token = stats.time_per_output_token
            if n_tokens > 1:
                per_token = per_token.observe(seconds / (n_tokens - 1))
            self._stats = replace(
                stats,
                tokens_predicted_total=stats.tokens_predicted_total + n_tokens,
                tokens_predicted_seconds_total=stats.tokens_predicted_seconds_total + seconds,
                tokens_predicted_steps_total=stats.tokens_predicted_steps_total + max(0, n_tokens - 1),
                time_per_output_token=per_token,
            )

    def on_prompt_start(self, n_cached: int, restored: bool) -> None:
        """A job got its slot with ``n_cached`` prompt tokens already in its cells (``restored``:
        they came from the prompt cache)."""
        with self._lock:
            stats = self._stats
            self._stats = replace(stats, prompt_tokens_cached_total=stats.prompt_tokens_cached_total + n_cached,
                                  prompt_cache_restores_total=stats.prompt_cache_restores_total + int(restored))

    def on_prompt_cache(self, n_bytes: int, n_prompts: int) -> None:
        with self._lock:
            self._stats = replace(self._stats, prompt_cache_bytes=n_bytes, prompt_cache_prompts=n_prompts)

    def on_sleep(self, sleeping: bool) -> None:
        with self._lock:
            self._stats = replace(self._stats, sleeping=sleeping, requests_processing=0)

    def on_load(self, processing: int, deferred: int, kv_used: int = 0, kv_total: int = 0) -> None:
        with self._lock:
            self._stats = replace(self._stats, requests_processing=processing, requests_deferred=deferred,
                                  kv_cells_used=kv_used, kv_cells_total=kv_total)
