"""Generation rates count decode steps, as llama-server's do: a generation's first token comes from
the last prompt batch's logits, at no step of its own, so one token has a rate of 0 and n tokens are
n - 1 steps (timings and /metrics alike)."""

from __future__ import annotations

import requests

from tests.integration.conftest import Server


def test_one_predicted_token_has_no_rate_and_more_count_their_steps(vertex_server: Server) -> None:
    body = {"prompt": "I believe", "ignore_eos": True}
    one = requests.post(vertex_server.url("/completion"), json={**body, "n_predict": 1}, timeout=120).json()["timings"]
    assert one["predicted_n"] == 1
    assert one["predicted_per_second"] == 0.0 and one["predicted_per_token_ms"] == 0.0
    many = requests.post(vertex_server.url("/completion"), json={**body, "n_predict": 16}, timeout=120).json()
    timings = many["timings"]
    assert timings["predicted_n"] == 16 and timings["predicted_ms"] > 0
    assert abs(timings["predicted_per_second"] - 1e3 / timings["predicted_ms"] * 15) < 1e-6
    assert abs(timings["predicted_per_token_ms"] - timings["predicted_ms"] / 15) < 1e-9


def metrics(server: Server) -> dict[str, float]:
    values = {}
    for line in requests.get(server.url("/metrics"), timeout=30).text.splitlines():
        if line.startswith("llamacpp:") and " " in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_the_metrics_rate_counts_steps_and_covers_the_time_since_the_last_scrape(vertex_server: Server) -> None:
    """llama-server's rate gauges average the window between two scrapes: the steps over the seconds of
    the work done in it (fewer steps than tokens), and 0 for a window without work."""
    before = metrics(vertex_server)
    requests.post(vertex_server.url("/completion"), json={"prompt": "x", "n_predict": 8, "ignore_eos": True},
                  timeout=120)
    after = metrics(vertex_server)
    tokens = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    seconds = after["llamacpp:tokens_predicted_seconds_total"] - before["llamacpp:tokens_predicted_seconds_total"]
    rate = after["llamacpp:predicted_tokens_seconds"]
    assert tokens == 8 and seconds > 0
    assert abs(rate - (tokens - 1) / seconds) < 1e-6 * rate  # 7 decode steps: the first token costs none
    assert after["llamacpp:prompt_tokens_seconds"] > 0
    idle = metrics(vertex_server)
    assert idle["llamacpp:predicted_tokens_seconds"] == 0 and idle["llamacpp:prompt_tokens_seconds"] == 0
    assert idle["llamacpp:tokens_predicted_total"] == after["llamacpp:tokens_predicted_total"]  # totals stay
