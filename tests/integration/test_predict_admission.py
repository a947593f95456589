"""A /predict is admitted as a unit: all its instances are answered, however many slots; a full
queue refuses the whole request with 429 and Retry-After, never a mix of answers and refusals."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import requests

from tests.integration.conftest import Server, start

VERTEX = {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "/predict"}


def predict(server: Server, instances: list[dict[str, object]]) -> requests.Response:
    return requests.post(server.url("/predict"), json={"instances": instances}, timeout=600)


def test_128_instances_on_4_slots_are_128_predictions(tmp_path: Path) -> None:
    server = start(tmp_path, ["-np", "4", "-c", "2048"], VERTEX)
    try:
        instances: list[dict[str, object]] = [
            {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": f"Say {n}"}],
             "max_tokens": 2} for n in range(128)]
        reply = predict(server, instances)
        assert reply.status_code == 200
        predictions = reply.json()["predictions"]
        assert len(predictions) == 128
        refused = [p for p in predictions if "error" in p]
        assert not refused, refused[:3]
        assert all(p["choices"][0]["message"]["role"] == "assistant" for p in predictions)
        assert server.wait_slots_idle()
    finally:
        server.stop()


def test_a_full_queue_refuses_the_whole_predict_with_429(tmp_path: Path) -> None:
    server = start(tmp_path, ["-np", "1", "-c", "1024", "--max-queue", "0"], VERTEX)
    try:
        def long_generation() -> None:
            requests.post(server.url("/completion"), json={"prompt": "Once", "n_predict": 300, "ignore_eos": True},
                          timeout=300)

        runner = threading.Thread(target=long_generation)
        runner.start()
        deadline = time.monotonic() + 30
        while not any(s["is_processing"] for s in requests.get(server.url("/slots"), timeout=10).json()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        instances: list[dict[str, object]] = [{"@requestFormat": "tokenize", "content": "a"},
                                              {"@requestFormat": "completion", "prompt": "b", "n_predict": 2}]
        refused = predict(server, instances)
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "1"
        error = refused.json()["error"]
        assert error["code"] == 429 and "--max-queue" in error["message"]
        runner.join(300)
        admitted = predict(server, instances)
        assert admitted.status_code == 200
        assert [("error" in p) for p in admitted.json()["predictions"]] == [False, False]
    finally:
        server.stop()
