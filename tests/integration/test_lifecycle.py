"""Start-up failures, settings that reach the engine, and graceful shutdown of a real process."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from tests.integration.conftest import ROOT, clean_environment, launch, start


def run_app(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env=clean_environment(env or {}),
    )


def test_an_unknown_flag_exits_2_naming_it() -> None:
    result = run_app(["--no-such-flag"])
    assert result.returncode == 2
    assert "--no-such-flag" in result.stderr


def test_llama_servers_underscore_spellings_start_the_server(tmp_path: Path) -> None:
    server = start(tmp_path, ["--ctx_size", "1024", "--parallel", "1", "--n_predict", "3", "--no_slots"])
    try:
        props = requests.get(server.url("/props"), timeout=30).json()
        assert props["default_generation_settings"]["n_ctx"] == 1024 and props["total_slots"] == 1
        assert requests.get(server.url("/slots"), timeout=30).status_code == 501  # --no_slots took effect
    finally:
        assert server.stop() == 0, server.log()


def test_a_bad_value_exits_2_naming_the_flag() -> None:
    result = run_app(["--ctx-size", "lots"])
    assert result.returncode == 2
    assert "--ctx-size" in result.stderr


def test_help_lists_the_flags() -> None:
    result = run_app(["--help"])
    assert result.returncode == 0
    for flag in ("--model", "--parallel", "--api-key", "LLAMA_ARG_CTX_SIZE", "--no-cont-batching"):
        assert flag in result.stdout


def test_a_missing_model_exits_non_zero(tmp_path: Path) -> None:
    result = run_app(["--model", str(tmp_path / "absent.gguf")])
    assert result.returncode != 0
    assert "model file not found" in result.stderr


def test_a_file_that_is_not_gguf_exits_non_zero(tmp_path: Path) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a model at all")
    result = run_app(["--model", str(fake)])
    assert result.returncode != 0
    assert "not a GGUF file" in result.stderr


def test_a_gguf_that_llama_cpp_cannot_load_exits_non_zero(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)
    server = launch(tmp_path, ["--model", str(broken)])
    code = server.process.wait(120)
    assert code != 0
    assert "could not load" in server.log()


def test_a_predict_route_that_shadows_an_api_route_stops_start_up() -> None:
    result = run_app([], {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "/tokenize"})
    assert result.returncode == 4  # the worker finds it, before the model is served
    assert "conflicts with an existing llama-server route" in result.stderr


def test_settings_from_environment_and_alias(tmp_path: Path) -> None:
    server = start(tmp_path, ["--alias", "zeta,alpha"], {"LLAMA_ARG_N_PARALLEL": "3", "LLAMA_ARG_CTX_SIZE": "1536"})
    try:
        props = requests.get(server.url("/props"), timeout=10).json()
        assert props["total_slots"] == 3
        assert props["default_generation_settings"]["n_ctx"] == 512
        models = requests.get(server.url("/v1/models"), timeout=10).json()
        assert models["data"][0]["id"] == "alpha"
        assert models["data"][0]["aliases"] == ["alpha", "zeta"]
    finally:
        assert server.stop() == 0


def test_sigterm_lets_in_flight_requests_finish_then_exits_0(tmp_path: Path) -> None:
    server = start(tmp_path, ["-np", "2", "-c", "2048"])
    outcome: dict[str, object] = {}

    def long_request() -> None:
        response = requests.post(server.url("/completion"), timeout=120,
                                 json={"prompt": "Tell a story", "n_predict": 150, "ignore_eos": True})
        outcome["status"] = response.status_code
        outcome["tokens"] = response.json()["tokens_predicted"]

    worker = threading.Thread(target=long_request)
    worker.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        slots = requests.get(server.url("/slots"), timeout=10).json()
        if any(slot["is_processing"] for slot in slots):
            break
        time.sleep(0.02)
    code = server.stop()
    worker.join(60)
    assert code == 0, server.log()
    assert outcome == {"status": 200, "tokens": 150}


def test_after_sigterm_requests_not_yet_started_get_503_and_running_ones_finish(tmp_path: Path) -> None:
    server = start(tmp_path, ["-np", "2", "-c", "2048", "--threads-http", "2"])
    threads = int(requests.get(server.url("/props"), timeout=10).json()["total_slots"]) + 4
    results: dict[int, tuple[int, object]] = {}

    def call(number: int) -> None:
        response = requests.post(server.url("/completion"), timeout=120,
                                 json={"prompt": f"Story {number}", "n_predict": 250, "ignore_eos": True})
        results[number] = (response.status_code, response.json())

    workers = [threading.Thread(target=call, args=(n,)) for n in range(threads + 2)]
    for worker in workers:
        worker.start()
    # every request has reached the server (none is left in the kernel's accept queue, where a
    # stopping server's closed listener would drop it): the HTTP threads are busy, the rest queued
    accepted_connections(server.port, threads + 2)
    code = server.stop()
    for worker in workers:
        worker.join(120)
    assert code == 0, server.log()
    statuses = sorted(status for status, _ in results.values())
    assert len(results) == threads + 2
    assert statuses.count(200) >= 1
    refused = [body for status, body in results.values() if status == 503]
    assert refused, statuses
    assert all(body["error"]["message"] == "the server is shutting down" for body in refused)  # type: ignore[index]
    finished = [body for status, body in results.values() if status == 200]
    assert all(body["tokens_predicted"] == 250 for body in finished)  # type: ignore[index]


def accepted_connections(port: int, count: int) -> None:
    """Wait until ``count`` connections to ``port`` are established and the listener's accept queue
    is empty (Linux's /proc/net/tcp: a listening socket's rx_queue is its accept backlog)."""
    local = f":{port:04X}"
    while True:
        established = backlog = 0
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if not fields[1].endswith(local):
                continue
            if fields[3] == "01":
                established += 1
            elif fields[3] == "0A":
                backlog += int(fields[4].split(":")[1], 16)
        if established >= count and backlog == 0:
            return
        time.sleep(0.02)


def test_a_vertex_deployment_without_a_model_stops_instead_of_serving_the_demo_model() -> None:
    deployed = {"AIP_MODE": "PREDICTION", "AIP_STORAGE_URI": "", "AIP_DEPLOYED_MODEL_ID": "123",
                "AIP_ENDPOINT_ID": "456", "AIP_HTTP_PORT": "8080"}  # it exits before binding
    result = run_app([], deployed)
    assert result.returncode == 1
    assert "no model" in result.stderr and "--artifact-uri" in result.stderr and "LLAMA_ARG_MODEL" in result.stderr


def test_a_local_run_in_vertex_mode_still_serves_the_embedded_model(tmp_path: Path) -> None:
    server = start(tmp_path, [], {"AIP_MODE": "PREDICTION", "AIP_STORAGE_URI": ""})
    try:
        assert requests.get(server.url("/v1/models"), timeout=10).json()["data"][0]["id"].startswith("SmolLM2")
    finally:
        assert server.stop() == 0
