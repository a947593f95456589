"""GET /metrics: llama-server's ``llamacpp:`` metrics, rendered by prometheus-client.

A custom collector reads the engine's counters at scrape time, so nothing is updated on the hot
path. ``llamacpp:n_sequences_per_decode_max`` is this server's addition: the most sequences one
``llama_decode`` has carried, which shows that concurrent requests share decode steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.engine import EngineStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class EngineCollector(Collector):
    def __init__(self, read_stats: Callable[[], EngineStats]) -> None:
        self._read_stats = read_stats

    def collect(self) -> Iterator[Metric]:
        stats = self._read_stats()
        counters = (
            ("prompt_tokens_total", "Number of prompt tokens processed.", stats.prompt_tokens_total),
            ("prompt_seconds_total", "Prompt process time", stats.prompt_seconds_total),
            ("tokens_predicted_total", "Number of generation tokens processed.", stats.tokens_predicted_total),
            ("tokens_predicted_seconds_total", "Predict process time", stats.tokens_predicted_seconds_total),
            ("n_decode_total", "Total number of llama_decode() calls", stats.n_decode_total),
        )
        for name, help_text, value in counters:
            yield CounterMetricFamily(f"llamacpp:{name}", help_text, value=value)
        gauges = (
            ("n_tokens_max", "Largest observed n_tokens.", stats.n_tokens_max),
            ("prompt_tokens_seconds", "Average prompt throughput in tokens/s.", stats.prompt_tokens_per_second),
            ("predicted_tokens_seconds", "Average generation throughput in tokens/s.",
             stats.predicted_tokens_per_second),
            ("requests_processing", "Number of requests processing.", stats.requests_processing),
            ("requests_deferred", "Number of requests deferred.", stats.requests_deferred),
            ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
             stats.busy_slots_per_decode),
            ("n_sequences_per_decode_max", "Most sequences decoded together in one llama_decode() call",
             stats.max_sequences_per_decode),
        )
        for name, help_text, value in gauges:
            yield GaugeMetricFamily(f"llamacpp:{name}", help_text, value=value)


class MetricsExporter:
    def __init__(self, read_stats: Callable[[], EngineStats]) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(EngineCollector(read_stats))

    def render(self) -> str:
        return generate_latest(self._registry).decode("utf-8")
