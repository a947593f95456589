"""llama.cpp's process-wide set-up (app/engine/llama/ggml.py, ``set_up_llama_cpp``): done once however
many threads ask, retried after a failure, and started by the worker on a thread of its own before
its engine exists (app/server/gunicorn_server.py), so that ggml's scan of its CPU variants runs beside the
worker's imports."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import app.server.gunicorn_server as gunicorn_server
from app.engine.errors import ModelLoadError
from app.engine.lazy import lazy_exports
from app.engine.llama import ggml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_set_up(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A process whose llama.cpp is not set up yet, as far as ``set_up_llama_cpp`` knows: the log
    bridge and the backend scan are recorded instead of done (this process's are done already)."""
    steps: list[str] = []
    monkeypatch.setattr(ggml, "_set_up", False)
    monkeypatch.setattr(ggml, "install_log_callback", lambda verbose: steps.append(f"log bridge {verbose}"))
    monkeypatch.setattr(ggml, "load_ggml_backends", lambda: steps.append("backends"))
    return steps


def test_set_up_once_for_every_caller(fresh_set_up: list[str]) -> None:
    for _ in range(3):
        ggml.set_up_llama_cpp(True)
    assert fresh_set_up == ["log bridge True", "backends"]


def test_threads_that_ask_together_wait_for_the_one_set_up(fresh_set_up: list[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's set-up thread and the engine thread's backend may ask at the same moment: the
    backends are scanned once, and neither returns before they are."""
    scanning, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def slow_scan() -> None:
        scanning.set()
        release.wait(10)
        fresh_set_up.append("backends")

    monkeypatch.setattr(ggml, "load_ggml_backends", slow_scan)

    def ask(name: str) -> None:
        ggml.set_up_llama_cpp(False)
        finished.append(name)

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    assert scanning.wait(10)
    second = threading.Thread(target=ask, args=("second",))
    second.start()
    second.join(0.2)
    assert finished == []  # the second waits for the scan under way
    release.set()
    first.join(10)
    second.join(10)
    assert sorted(finished) == ["first", "second"]
    assert fresh_set_up == ["log bridge False", "backends"]


def test_a_failed_set_up_is_tried_again(fresh_set_up: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The early thread's failure is not remembered as done: the engine thread's own call repeats the
    set-up and raises, where a failed load is reported."""
    def no_backend() -> None:
        raise ModelLoadError("none of the CPU backends runs on this CPU")

    monkeypatch.setattr(ggml, "load_ggml_backends", no_backend)
    for _ in range(2):
        with pytest.raises(ModelLoadError, match="CPU backends"):
            ggml.set_up_llama_cpp(False)
    monkeypatch.setattr(ggml, "load_ggml_backends", lambda: fresh_set_up.append("backends"))
    ggml.set_up_llama_cpp(False)
    assert fresh_set_up[-1] == "backends"
    assert ggml._set_up


def test_the_early_thread_leaves_a_failure_to_the_load(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    def fails(verbose: bool) -> None:
        raise ModelLoadError("none of the CPU backends runs on this CPU")

    monkeypatch.setattr(ggml, "set_up_llama_cpp", fails)
    with caplog.at_level(logging.DEBUG, logger="app"):
        gunicorn_server.set_up_llama_cpp_early(False)  # no exception: the engine thread reports it
    assert [(r.levelno, "CPU backends" in r.getMessage()) for r in caplog.records] == [(logging.DEBUG, True)]


def test_the_worker_sets_up_llama_cpp_on_its_own_thread_before_its_engine() -> None:
    """``ContainerServer.load`` (the worker's first step) starts the set-up; here the application it
    builds makes no backend at all, so only that thread can have set llama.cpp up."""
    probe = """
import shutil, sys, threading, types
from app.server.cli import gunicorn_options
from app.server.gunicorn_server import ContainerServer
from app.config.settings import parse_settings

def build_application(settings, model_path, vertex, make_backend, on_ready):
    for thread in threading.enumerate():
        if thread.name == "llama-set-up":
            thread.join(60)
    from app.engine.llama import ggml
    print(ggml._set_up, ggml._open_ggml(ggml._lib_dir()).ggml_backend_dev_by_type(ggml.GGML_DEVICE_CPU) is not None)
    return types.SimpleNamespace(flask=None)

wiring = types.ModuleType("app.server.wiring")
wiring.build_application = build_application
sys.modules["app.server.wiring"] = wiring
settings = parse_settings([], {})
server = ContainerServer(settings, "/models/fake.gguf", None, gunicorn_options(settings, 0))
try:
    server.load()
finally:
    shutil.rmtree(server._crash_dir, ignore_errors=True)
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.stdout.split() == ["True", "True"], result.stdout + result.stderr


def test_the_llama_package_imports_its_modules_only_when_asked() -> None:
    """``import app.engine.llama`` runs none of its modules (the set-up thread imports ggml alone);
    its names still come from the package."""
    probe = ("import sys, app.engine.llama as package; "
             "print(sorted(m for m in sys.modules if m.startswith(('llama_cpp', 'app.engine.llama.')))); "
             "print(package.LlamaBackend.__module__, package.loaded_cpu_variant.__module__)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.stdout.splitlines() == ["[]", "app.engine.llama.backend app.engine.llama.ggml"], (
        result.stdout + result.stderr)


def test_lazy_exports_name_the_package_of_an_unknown_name() -> None:
    getattr_ = lazy_exports("somewhere", {"Path": "pathlib"})
    assert getattr_("Path") is Path
    with pytest.raises(AttributeError, match="module 'somewhere' has no attribute 'Missing'"):
        getattr_("Missing")
