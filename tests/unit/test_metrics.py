"""/metrics, scraped and parsed with prometheus-client's own parser: every declared metric, with
llama-server's names and vLLM's (which Vertex AI's AutoMetrics and autoscaling read)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.protocol.metrics import METRICS
from app.server.wiring import Application
from tests.inprocess import PROMPT, make_application


@pytest.fixture(scope="module")
def with_metrics() -> Iterator[Application]:
    built = make_application("--metrics")
    yield built
    built.shutdown()


def scrape(application: Application) -> dict[str, dict[str, float]]:
    text = application.flask.test_client().get("/metrics").get_data(as_text=True)
    families = {}
    for metric in text_string_to_metric_families(text):
        families[metric.name] = {sample.name + str(sorted(sample.labels.items())): sample.value
                                 for sample in metric.samples}
    return families


def test_every_declared_metric_is_exposed_with_its_type(with_metrics: Application) -> None:
    text = with_metrics.flask.test_client().get("/metrics").get_data(as_text=True)
    kinds = {metric.name: metric.type for metric in text_string_to_metric_families(text)}
    for spec in METRICS:
        exposed = "counter" if spec.kind == "positions" else spec.kind  # a counter per draft position
        family = spec.name.removesuffix("_total") if exposed == "counter" else spec.name
        assert kinds.get(family) == exposed, spec.name
    assert len({spec.name for spec in METRICS}) == len(METRICS)


def test_the_vllm_metrics_follow_the_work(with_metrics: Application) -> None:
    client = with_metrics.flask.test_client()
    before = scrape(with_metrics)
    assert client.post("/completion", json={"prompt": PROMPT, "n_predict": 6}).status_code == 200
    after = scrape(with_metrics)
    generated = "vllm:generation_tokens_total[]"
    assert after["vllm:generation_tokens"][generated] - before["vllm:generation_tokens"][generated] == 6
    assert after["vllm:prompt_tokens"]["vllm:prompt_tokens_total[]"] > before["vllm:prompt_tokens"][
        "vllm:prompt_tokens_total[]"]
    assert 0.0 <= after["vllm:gpu_cache_usage_perc"]["vllm:gpu_cache_usage_perc[]"] <= 1.0
    ttft = after["vllm:time_to_first_token_seconds"]
    assert ttft["vllm:time_to_first_token_seconds_count[]"] >= 1
    assert ttft["vllm:time_to_first_token_seconds_bucket[('le', '+Inf')]"] == ttft[
        "vllm:time_to_first_token_seconds_count[]"]
    tpot = after["vllm:time_per_output_token_seconds"]
    assert tpot["vllm:time_per_output_token_seconds_count[]"] >= 1


def test_the_engines_own_time_per_step_is_measured(with_metrics: Application) -> None:
    """llamacpp:step_host_seconds: a step per generated token (after the prompt's), each observed."""
    def observed() -> tuple[float, float]:
        family = scrape(with_metrics)["llamacpp:step_host_seconds"]
        return family["llamacpp:step_host_seconds_count[]"], family["llamacpp:step_host_seconds_sum[]"]

    count, total = observed()
    client = with_metrics.flask.test_client()
    assert client.post("/completion", json={"prompt": "Count>", "n_predict": 6, "cache_prompt": False}
                       ).status_code == 200
    count_after, total_after = observed()
    assert count_after - count >= 6  # the prompt's decode, then one a token
    assert total_after > total
