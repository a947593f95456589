"""GET /metrics: one declaration of every metric (``METRICS``), rendered by prometheus-client.

The ``llamacpp:`` metrics are llama-server's; ``llamacpp:n_sequences_per_decode_max`` is this
server's addition (the most sequences one ``llama_decode`` has carried). The ``vllm:`` metrics
carry vLLM's names and meanings, so Vertex AI's AutoMetrics and its autoscaling targets on
``vertex_vllm_num_requests_waiting`` / ``vertex_vllm_gpu_cache_usage_perc`` work unchanged. The
``llamacpp:spec_decode_*`` counters are zero (the per-position one empty) without speculative decoding. A
collector reads the engine's counters at scrape time: nothing is updated on the hot path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from app.engine import EngineStats
from app.engine.stats import Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: Literal["counter", "gauge", "histogram", "positions"]  # positions: a counter per draft position
    help: str
    read: Callable[[EngineStats], float | Histogram | tuple[int, ...]]
    # read from the window since the previous scrape, not from the start (llama-server's "bucket" gauges:
    # averaged over the time between two scrapes, and 0 in a window without work, asleep or awake)
    windowed: bool = False


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
               lambda s: s.prompt_tokens_total),
    MetricSpec("llamacpp:prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache",
               lambda s: s.prompt_tokens_cached_total),
    MetricSpec("llamacpp:prompt_cache_restores_total", "counter",
               "Prompt states written into a slot from the prompt cache (--cache-ram)",
               lambda s: s.prompt_cache_restores_total),
    MetricSpec("llamacpp:prompt_cache_bytes", "gauge", "Bytes of the prompt states kept in the prompt cache",
               lambda s: s.prompt_cache_bytes),
    MetricSpec("llamacpp:prompt_cache_prompts", "gauge", "Prompt states kept in the prompt cache",
               lambda s: s.prompt_cache_prompts),
    MetricSpec("llamacpp:prompt_seconds_total", "counter", "Prompt process time", lambda s: s.prompt_seconds_total),
    MetricSpec("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
               lambda s: s.tokens_predicted_total),
    MetricSpec("llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time",
               lambda s: s.tokens_predicted_seconds_total),
    MetricSpec("llamacpp:n_decode_total", "counter", "Total number of llama_decode() calls",
               lambda s: s.n_decode_total),
    MetricSpec("llamacpp:n_tokens_max", "gauge", "Largest observed n_tokens.", lambda s: s.n_tokens_max),
    MetricSpec("llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
               lambda s: s.prompt_tokens_per_second, windowed=True),
    MetricSpec("llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
               lambda s: s.predicted_tokens_per_second, windowed=True),
    MetricSpec("llamacpp:requests_processing", "gauge", "Number of requests processing.",
               lambda s: s.requests_processing),
    MetricSpec("llamacpp:requests_deferred", "gauge", "Number of requests deferred.", lambda s: s.requests_deferred),
    MetricSpec("llamacpp:n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call",
               lambda s: s.busy_slots_per_decode),
    MetricSpec("llamacpp:n_sequences_per_decode_max", "gauge",
               "Most sequences decoded together in one llama_decode() call", lambda s: s.max_sequences_per_decode),
    MetricSpec("llamacpp:spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated",
               lambda s: s.draft_tokens_total),
    MetricSpec("llamacpp:spec_decode_num_accepted_tokens_total", "counter",
               "Speculative: Total draft tokens accepted by the target model", lambda s: s.draft_accepted_total),
    MetricSpec("llamacpp:spec_decode_num_drafts_total", "counter",
               "Speculative: Total speculative decoding verification steps", lambda s: s.drafts_total),
    MetricSpec("llamacpp:spec_decode_num_accepted_tokens_per_pos_total", "positions",
               "Accepted tokens per draft position", lambda s: s.accepted_per_position),
    MetricSpec("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
               lambda s: s.requests_processing),
    MetricSpec("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
               lambda s: s.requests_deferred),
    MetricSpec("vllm:gpu_cache_usage_perc", "gauge",
               "KV-cache usage. 1 means 100 percent usage (the cells of the working slots, on CPU or GPU).",
               lambda s: s.kv_usage),
    MetricSpec("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
               lambda s: s.prompt_tokens_total),
    MetricSpec("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
               lambda s: s.tokens_predicted_total),
    MetricSpec("vllm:time_to_first_token_seconds", "histogram",
               "Histogram of time to first token in seconds (from the request's slot).",
               lambda s: s.time_to_first_token),
    MetricSpec("llamacpp:step_host_seconds", "histogram",
               "Seconds the engine thread spends outside llama_decode per decode step (batching, sampling, "
               "detokenizing, handing events over)", lambda s: s.step_host_seconds),
    MetricSpec("vllm:time_per_output_token_seconds", "histogram", "Histogram of time per output token in seconds.",
               lambda s: s.time_per_output_token),
)


def family(spec: MetricSpec, stats: EngineStats) -> Metric:
    value = spec.read(stats)
    if spec.kind == "histogram":
        assert isinstance(value, Histogram)
        return HistogramMetricFamily(spec.name, spec.help, buckets=value.cumulative(), sum_value=value.total)
    if spec.kind == "positions":
        assert isinstance(value, tuple)
        counters = CounterMetricFamily(spec.name, spec.help, labels=["position"])
        for position, count in enumerate(value):
            counters.add_metric([str(position)], count)
        return counters
    assert not isinstance(value, Histogram | tuple)
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name, spec.help, value=value)
    return GaugeMetricFamily(spec.name, spec.help, value=value)


class EngineCollector(Collector):
    def __init__(self, read_stats: Callable[[], EngineStats]) -> None:
        self._read_stats = read_stats
        self._lock = threading.Lock()
        self._previous = EngineStats()  # the stats of the previous scrape

    def collect(self) -> Iterator[Metric]:
        stats = self._read_stats()
        with self._lock:
            window = stats.since(self._previous)
            self._previous = stats
        for spec in METRICS:
            yield family(spec, window if spec.windowed else stats)


class MetricsExporter:
    def __init__(self, read_stats: Callable[[], EngineStats]) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(EngineCollector(read_stats))

    def render(self) -> str:
        return generate_latest(self._registry).decode("utf-8")
