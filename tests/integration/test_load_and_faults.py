"""Bounded load, faults and security on real servers: 32 concurrent clients with a mix of calls,
a decode failure injected through the backend seam, a slow stream reader, the queue limit, keys
that never reach the log, CORS origins, and JSON logs with access lines."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from werkzeug.serving import make_server

from app.config.settings import parse_settings
from app.engine import DecodeError
from app.engine.llama import LlamaBackend, LlamaConfig
from app.model_sources.files import embedded_model_path
from app.server.wiring import build_application
from tests.integration.conftest import Server, start

CLIENTS = 32
LOAD_SECONDS = 20
MAX_CALLS_PER_CLIENT = 8


def worker_rss_kib(server: Server) -> int:
    children = subprocess.run(["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True).stdout.split()
    total = 0
    for pid in children:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


@pytest.fixture(scope="module")
def load_server(server_dir: Path) -> Iterator[Server]:
    server = start(server_dir, ["-np", "4", "-c", "4096", "--metrics", "--max-queue", "256"],
                   {"AIP_MODE": "PREDICTION"})
    yield server
    assert server.stop() == 0, server.log()


class Client:
    def __init__(self, server: Server, number: int) -> None:
        self.server, self.number = server, number
        self.problems: list[str] = []
        self.completed = 0
        self.ids: list[str] = []

    def check(self, condition: bool, what: str) -> None:
        if not condition:
            self.problems.append(f"client {self.number}: {what}")

    def post(self, path: str, body: Any, **kwargs: Any) -> requests.Response:
        response = requests.post(self.server.url(path), json=body, timeout=300, **kwargs)
        self.check(response.status_code < 500, f"{path} answered {response.status_code}: {response.text[:200]}")
        return response

    def chat_stream(self, disconnect: bool) -> None:
        body = {"messages": [{"role": "user", "content": f"Client {self.number} says hi"}], "max_tokens": 24,
                "stream": True}
        with self.post("/v1/chat/completions", body, stream=True) as response:
            events = []
            for line in response.iter_lines(decode_unicode=True):
                if line.startswith("data: "):
                    events.append(line[6:])
                    if disconnect and len(events) == 2:
                        return  # leaves mid-stream
        self.check(events[-1] == "[DONE]", "stream did not end with [DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        self.check(chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length"), "no finish chunk")
        self.check(len({c["id"] for c in chunks}) == 1, "the stream mixed ids")
        self.ids.append(chunks[0]["id"])

    def chat(self) -> None:
        body = {"messages": [{"role": "user", "content": f"Client {self.number}"}], "max_tokens": 16}
        reply = self.post("/v1/chat/completions", body).json()
        self.check(reply["choices"][0]["message"]["role"] == "assistant", "chat without a message")
        self.ids.append(reply["id"])

    def completion(self) -> None:
        reply = self.post("/completion", {"prompt": f"Number {self.number}:", "n_predict": 12}).json()
        self.check(reply["stop"] is True and reply["tokens_predicted"] <= 12, "bad completion")

    def predict(self) -> None:
        instances: list[dict[str, object]] = [
            {"@requestFormat": "tokenize", "content": f"client {self.number} item {i}"} for i in range(3)]
        instances.append({"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": "Yo"}],
                          "max_tokens": 8})
        predictions = self.post("/predict", {"instances": instances}).json()["predictions"]
        self.check(len(predictions) == 4, "lost predictions")
        for i, prediction in enumerate(predictions[:3]):
            text = self.post("/detokenize", {"tokens": prediction["tokens"]}).json()["content"]
            self.check(text == f"client {self.number} item {i}", f"prediction {i} belongs to someone else: {text}")
        self.ids.append(predictions[3]["id"])

    def tokenize(self) -> None:
        text = f"client {self.number} at {time.monotonic_ns()}"
        tokens = self.post("/tokenize", {"content": text}).json()["tokens"]
        self.check(self.post("/detokenize", {"tokens": tokens}).json()["content"] == text, "tokens mixed up")

    def health(self) -> None:
        self.check(requests.get(self.server.url("/health"), timeout=30).status_code == 200, "health")

    def run(self, deadline: float) -> None:
        calls = [lambda: self.chat_stream(self.number % 8 == 0), self.chat, self.completion, self.predict,
                 self.tokenize, self.health]
        for call_number in range(MAX_CALLS_PER_CLIENT):
            if time.monotonic() > deadline:
                break
            call = calls[(self.number + call_number) % len(calls)]
            try:
                call()
                self.completed += 1
            except Exception as exc:
                self.problems.append(f"client {self.number}: {type(exc).__name__}: {exc}")


def test_thirty_two_clients(load_server: Server) -> None:
    rss_before = worker_rss_kib(load_server)
    health_latencies: list[float] = []
    stop = threading.Event()

    def watch_health() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            status = requests.get(load_server.url("/health"), timeout=30).status_code
            health_latencies.append(time.perf_counter() - started if status == 200 else float("inf"))
            stop.wait(0.5)

    watcher = threading.Thread(target=watch_health)
    watcher.start()
    clients = [Client(load_server, n) for n in range(CLIENTS)]
    deadline = time.monotonic() + LOAD_SECONDS
    threads = [threading.Thread(target=client.run, args=(deadline,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    stop.set()
    watcher.join(60)
    problems = [problem for client in clients for problem in client.problems]
    assert problems == []
    ids = [i for client in clients for i in client.ids]
    assert len(ids) == len(set(ids)) > CLIENTS  # every answer is its own, none duplicated
    assert sum(client.completed for client in clients) >= CLIENTS * 2
    assert health_latencies and max(health_latencies) < 10.0, max(health_latencies)  # Vertex's health limit
    load_server.wait_slots_idle(30)
    rss_after = worker_rss_kib(load_server)
    print(f"worker RSS before {rss_before // 1024} MiB, after {rss_after // 1024} MiB")
    assert rss_after - rss_before < 300 * 1024


def test_a_slow_stream_reader_does_not_stall_the_engine(load_server: Server) -> None:
    body = {"prompt": "A very long tale", "n_predict": 200, "ignore_eos": True, "stream": True}
    with requests.post(load_server.url("/completion"), json=body, stream=True, timeout=120) as slow:
        lines = slow.iter_lines(decode_unicode=True)
        next(line for line in lines if line.startswith("data: "))
        # the slow client reads nothing for now; the others are served meanwhile
        for n in range(4):
            reply = requests.post(load_server.url("/completion"), timeout=120,  # 8 tokens whatever is sampled
                                  json={"prompt": f"Quick {n}", "n_predict": 8, "ignore_eos": True})
            assert reply.status_code == 200 and reply.json()["tokens_predicted"] == 8
        events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert events[-1]["stop"] is True and events[-1]["tokens_predicted"] == 200


def test_requests_beyond_the_queue_limit_get_503(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "1", "-c", "1024", "--max-queue", "1", "--metrics"])
    try:
        long = {"prompt": "Tell me a story", "n_predict": 900, "ignore_eos": True, "stream": True}
        generating = requests.post(server.url("/completion"), json=long, stream=True, timeout=300)
        lines = generating.iter_lines()  # held open: a dropped iterator closes the connection, and so the job
        next(line for line in lines if line.startswith(b"data: "))  # it holds the one slot
        queued: list[requests.Response] = []
        waiter = threading.Thread(target=lambda: queued.append(
            requests.post(server.url("/completion"), json={**long, "stream": False, "n_predict": 2}, timeout=300)))
        waiter.start()
        deadline = time.monotonic() + 120
        while server.metric("llamacpp:requests_deferred") < 1:  # the second request waits in the queue
            assert time.monotonic() < deadline and waiter.is_alive(), server.log()
            time.sleep(0.05)
        refused = [requests.post(server.url("/completion"), json={"prompt": "x", "n_predict": 2}, timeout=60)
                   for _ in range(2)]
        assert [r.status_code for r in refused] == [503, 503]
        error = refused[0].json()["error"]
        assert error["type"] == "unavailable_error" and "--max-queue" in error["message"]
        generating.close()  # the job is cancelled, the slot frees; the queued request is served
        del lines
        waiter.join(300)
        assert [r.status_code for r in queued] == [200]
        assert requests.post(server.url("/completion"), json={"prompt": "again", "n_predict": 2},
                             timeout=60).status_code == 200
    finally:
        server.stop()


class FaultyBackend:
    """The real backend, except that a decode holding the poison token fails."""

    def __init__(self, config: LlamaConfig, poison: int) -> None:
        self.inner = LlamaBackend(config)
        self.poison = poison

    def decode(self, batch: Any) -> None:
        if any(entry.token == self.poison for entry in batch):
            raise DecodeError(-3)
        self.inner.decode(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_failed_decode_fails_its_job_alone(tmp_path: Path) -> None:
    settings = parse_settings(["-np", "4", "-c", "4096", "-t", "2"], {})
    probe = LlamaBackend(LlamaConfig(model_path=str(embedded_model_path()), n_ctx=256, n_seq=1))
    poison = probe.vocab.tokenize(" zebra", False, False)[0]
    probe.close()
    failures: list[BaseException] = []
    application = build_application(settings, str(embedded_model_path()), None, failures.append,
                                     lambda config: FaultyBackend(config, poison))
    server = make_server("127.0.0.1", 0, application.flask, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        assert application.context.engine.wait_ready(60) and not failures
        results: dict[str, requests.Response] = {}
        prompts = {"good1": "The sky is", "good2": "Water is", "bad": "The zebra is", "good3": "Fire is"}

        def call(name: str) -> None:
            results[name] = requests.post(base + "/completion", json={"prompt": prompts[name], "n_predict": 16,
                                                                      "ignore_eos": True}, timeout=120)

        workers = [threading.Thread(target=call, args=(name,)) for name in prompts]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(120)
        assert results["bad"].status_code == 500
        assert results["bad"].json()["error"]["type"] == "server_error"
        for name in ("good1", "good2", "good3"):
            assert results[name].status_code == 200 and results[name].json()["tokens_predicted"] == 16
        assert requests.get(base + "/health", timeout=10).status_code == 200
    finally:
        server.shutdown()
        application.shutdown()


def test_keys_never_reach_the_log_and_cors_origins_are_enforced(server_dir: Path) -> None:
    key_file = server_dir / "secret-keys.txt"
    key_file.write_text("file-key-0b5e7\n")
    server = start(server_dir, ["--api-key", "flag-key-9f3a1", "--api-key-file", str(key_file), "-v",
                                "--cors-origins", "https://app.example", "-np", "1", "-c", "1024"],
                   {"AIP_MODE": "PREDICTION"})
    try:
        for key in ("flag-key-9f3a1", "file-key-0b5e7"):
            ok = requests.post(server.url("/completion"), json={"prompt": "Hi", "n_predict": 2}, timeout=60,
                               headers={"Authorization": f"Bearer {key}", "Origin": "https://app.example"})
            assert ok.status_code == 200
            assert ok.headers["Access-Control-Allow-Origin"] == "https://app.example"
        stranger = requests.get(server.url("/health"), headers={"Origin": "https://evil.example"}, timeout=10)
        assert "Access-Control-Allow-Origin" not in stranger.headers
        assert requests.options(server.url("/completion"), timeout=10).status_code == 200  # preflight: no key
        wrong = requests.post(server.url("/completion"), json={"prompt": "Hi"}, timeout=10,
                              headers={"Authorization": "Bearer nope-not-this"})
        assert wrong.status_code == 401
    finally:
        server.stop()
    log = server.log()
    assert "flag-key-9f3a1" not in log and "file-key-0b5e7" not in log and "nope-not-this" not in log
    settings_line = next(line for line in log.splitlines() if "settings: " in line)
    assert "api_keys" in settings_line and "1 key(s)" in settings_line  # the count, never a key


def test_logs_are_json_lines_with_access_lines_on_vertex(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "1", "-c", "1024"], {"AIP_MODE": "PREDICTION"})
    try:
        reply = requests.post(server.url("/completion"), json={"prompt": "Hello", "n_predict": 3}, timeout=60,
                              headers={"X-Request-Id": "trace-me-42"})
        assert reply.headers["X-Request-Id"] == "trace-me-42"
        generated = requests.get(server.url("/health"), timeout=10).headers["X-Request-Id"]
        assert len(generated) == 32
        deadline = time.monotonic() + 60
        while "trace-me-42" not in server.log():  # the access line is written after the response
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
    finally:
        server.stop()
    entries = [json.loads(line) for line in server.log().splitlines() if line.strip()]
    assert all("severity" in entry and "message" in entry for entry in entries)
    access = [e for e in entries if e.get("logger") == "app.access"]
    mine = next(e for e in access if e.get("request_id") == "trace-me-42")
    assert mine["httpRequest"]["requestMethod"] == "POST" and mine["httpRequest"]["status"] == 200
    assert mine["tokens"] == 3 and "Hello" not in json.dumps(mine)
    assert any("settings:" in e["message"] for e in entries)
    assert any("model loaded" in e["message"] for e in entries)


def test_logs_are_plain_text_off_vertex(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "1", "-c", "1024"])
    try:
        requests.get(server.url("/health"), timeout=10)
    finally:
        server.stop()
    first = server.log().splitlines()[0]
    assert not first.startswith("{")
