"""Health under load, on a real server with the default request threads: 32 long streams on 4 slots,
so that every request thread is held (4 generating, the others waiting for a slot) and more
connections wait for a thread, while Vertex AI's health check polls. Every check is answered before
any stream has ended: a check that waited for a request thread would be answered only once a stream
ended, the first after thousands of tokens. The latency itself is measured by bench/report.py, not here."""

from __future__ import annotations

import threading
from pathlib import Path

import requests

from tests.integration.conftest import start

STREAMS = 32
SLOTS = 4
HEALTH_CHECKS = 20
BODY = {"n_predict": 2000, "ignore_eos": True, "stream": True}  # each slot holds 2048 tokens (-c 8192)


def test_health_never_waits_behind_generations(tmp_path: Path) -> None:
    server = start(tmp_path, ["-np", str(SLOTS), "-c", str(SLOTS * 2048)])
    stop = threading.Event()
    generating = threading.Semaphore(0)
    statuses: list[int] = []
    ended_on_their_own: list[int] = []

    def stream(number: int) -> None:
        body = {**BODY, "prompt": f"Story number {number}:"}
        with requests.post(server.url("/completion"), json=body, stream=True, timeout=600) as response:
            statuses.append(response.status_code)  # the headers come with the first event
            generating.release()
            for _ in response.iter_lines():
                if stop.is_set():
                    return  # closing the response cancels the generation
        ended_on_their_own.append(number)

    streams = [threading.Thread(target=stream, args=(n,), daemon=True) for n in range(STREAMS)]
    try:
        for thread in streams:
            thread.start()
        for _ in range(SLOTS):  # every slot is generating
            assert generating.acquire(timeout=300), server.log()
        for _ in range(HEALTH_CHECKS):
            health = requests.get(server.url("/health"), timeout=60)
            assert health.status_code == 200 and health.json() == {"status": "ok"}
        assert ended_on_their_own == []  # every check was answered while every stream was still running
    finally:
        stop.set()
        for thread in streams:
            thread.join(300)
        server.stop()
    assert statuses == [200] * STREAMS
