"""Real servers for integration tests: ``python -m app`` (gunicorn + llama.cpp + the embedded model)
on 127.0.0.1, started as a user or Vertex AI would start it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from app.model_sources.files import embedded_model_path

ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_environment(extra: dict[str, str]) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LLAMA_", "AIP_", "HF_"))
    }
    env.update(extra)
    return env


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    startup_statuses: list[int] = field(default_factory=list)
    startup_bodies: list[dict[str, object]] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, path: str = "/health", headers: dict[str, str] | None = None) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited with {self.process.returncode}:\n{self.log()}")
            try:
                response = requests.get(self.url(path), headers=headers, timeout=5)
            except requests.ConnectionError:
                time.sleep(0.02)
                continue
            self.startup_statuses.append(response.status_code)
            if response.status_code == 200:
                return
            self.startup_bodies.append(response.json())
            time.sleep(0.01)
        raise AssertionError(f"the server did not become healthy:\n{self.log()}")

    def metric(self, name: str) -> float:
        """One value of /metrics (the server runs with --metrics, or on Vertex AI)."""
        text = requests.get(self.url("/metrics"), timeout=10).text
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} missing from /metrics")

    def wait_slots_idle(self, timeout: float = 15, headers: dict[str, str] | None = None) -> list[dict[str, object]]:
        """Poll /slots until no slot is processing; the slots as last seen."""
        deadline = time.monotonic() + timeout
        while True:
            slots: list[dict[str, object]] = requests.get(self.url("/slots"), headers=headers, timeout=10).json()
            if not any(slot["is_processing"] for slot in slots):
                return slots
            if time.monotonic() > deadline:
                raise AssertionError(f"slots stayed busy: {slots}")
            time.sleep(0.1)

    def stop(self, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def while_loading(server: Server, path: str, seconds: float = STARTUP_SECONDS) -> list[tuple[int, int]]:
    """(``/health``'s status, ``path``'s status) asked together until /health answers 200: what a route
    answers while the model loads, and after."""
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (not seen or seen[-1][0] != 200):
        assert server.process.poll() is None, server.log()
        try:
            other = requests.get(server.url(path), timeout=5).status_code
            seen.append((requests.get(server.url("/health"), timeout=5).status_code, other))
        except requests.ConnectionError:
            time.sleep(0.02)
    return seen


def launch(
    tmp_dir: Path,
    args: list[str],
    env: dict[str, str] | None = None,
    port: int | None = None,
) -> Server:
    port = port or free_port()
    log_path = tmp_dir / f"server-{port}.log"
    command = [sys.executable, "-m", "app", "--port", str(port), "--threads", "2", *args]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT,
            env=clean_environment(env or {}),
        )
    return Server(process, port, log_path)


def start(tmp_dir: Path, args: list[str], env: dict[str, str] | None = None, **wait: object) -> Server:
    env = dict(env or {})
    port = free_port()
    if env.get("AIP_MODE") == "PREDICTION":
        env.setdefault("AIP_HTTP_PORT", str(port))
    server = launch(tmp_dir, args, env, port)
    try:
        server.wait_healthy(**wait)  # type: ignore[arg-type]
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def storage_emulator() -> Iterator[str]:
    """gcp-storage-emulator on 127.0.0.1, in memory; STORAGE_EMULATOR_HOST points the
    google-cloud-storage clients of this process (and of servers started meanwhile) at it."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(port),
         "--in-memory"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    host = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            requests.get(host + "/storage/v1/b", timeout=2)
            break
        except requests.ConnectionError:
            time.sleep(0.1)
    os.environ["STORAGE_EMULATOR_HOST"] = host
    try:
        yield host
    finally:
        del os.environ["STORAGE_EMULATOR_HOST"]
        process.terminate()
        process.wait(10)


@contextlib.contextmanager
def model_in_storage(beside: dict[str, Path] | None = None) -> Iterator[tuple[str, str]]:
    """The embedded model in a bucket of the storage emulator, with the files of ``beside`` (name: path)
    in its folder: (the emulator's address, the gs:// URI). A server loading it answers while it
    downloads, as on Vertex AI: a local 92 MB model can load before the worker has imported its HTTP
    side (app/server/wiring.py), leaving no 503 to see."""
    with storage_emulator() as host:
        from google.cloud import storage

        client = storage.Client()
        bucket = client.create_bucket("models")
        bucket.blob("smol/model.gguf").upload_from_filename(str(embedded_model_path()))
        for name, path in (beside or {}).items():
            bucket.blob(f"smol/{name}").upload_from_filename(str(path))
        client.close()
        yield host, "gs://models/smol/model.gguf"


@pytest.fixture(scope="session")
def server_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="session")
def vertex_server(server_dir: Path) -> Iterator[Server]:
    """The main server: Vertex AI mode, 8 slots of 1024 tokens, metrics and POST /props on."""
    server = start(
        server_dir,
        ["-np", "8", "-c", "8192", "--metrics", "--props"],
        {"AIP_MODE": "PREDICTION", "AIP_HEALTH_ROUTE": "/vertex/health", "AIP_PREDICT_ROUTE": "/predict"},
    )
    yield server
    assert server.stop() == 0, server.log()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Each phase's report on the test item (``item.report_call``...), for fixtures that act on a
    failure (the browser tests' screenshot)."""
    report: pytest.TestReport = yield
    setattr(item, f"report_{report.when}", report)
    return report
