"""Router mode's parts without processes: a child's command line, the catalog of models (folders and
preset files), and the models' states (--models-max, crashes, unloads that wait) over fake children.
tests/integration/test_router.py runs the same with real children."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from app.config.options import SettingsError
from app.protocol.errors import InvalidRequestError, ServerError
from app.router.arguments import as_flags, preset_argv, without_reserved
from app.router.catalog import CatalogError, ModelEntry, load_catalog
from app.router.children import Child, Spawner, child_environment
from app.router.connections import Connections
from app.router.models import RouterModels
from app.server.router_wiring import startup_models


def test_a_child_gets_the_routers_flags_less_those_the_router_keeps() -> None:
    argv = ["--host", "0.0.0.0", "--port=9000", "-t", "1", "--api-key", "k1", "--jinja", "--lora-scaled", "a.gguf",
            "0.5", "--models-dir", "/m", "--ctx_size", "512", "--models-max", "2", "--no-models-autoload",
            "--alias", "x", "--metrics"]
    assert without_reserved(argv) == ["-t", "1", "--jinja", "--lora-scaled", "a.gguf", "0.5", "--ctx-size", "512",
                                      "--metrics"]


def test_a_childs_environment_has_neither_vertex_ai_nor_the_routers_keys() -> None:
    env = child_environment({"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "8080", "LLAMA_API_KEY": "router",
                             "LLAMA_ARG_MODELS_DIR": "/m", "LLAMA_ARG_CTX_SIZE": "512", "PATH": "/bin"}, "child")
    assert env["LLAMA_API_KEY"] == "child" and env["LLAMA_ARG_CTX_SIZE"] == "512" and env["PATH"] == "/bin"
    assert not any(name.startswith("AIP_") for name in env) and "LLAMA_ARG_MODELS_DIR" not in env


@pytest.mark.parametrize(("key", "value", "flags"), [
    ("c", "4096", ["--ctx-size", "4096"]),
    ("ctx-size", "4096", ["--ctx-size", "4096"]),
    ("LLAMA_ARG_CACHE_RAM", "0", ["--cache-ram", "0"]),
    ("jinja", "true", ["--jinja"]),
    ("jinja", "false", ["--no-jinja"]),
    ("no-mmproj", "true", ["--no-mmproj-auto"]),
    ("embeddings", "false", []),
    ("n-gpu-layers", "all", ["--n-gpu-layers", "all"]),
])
def test_a_preset_key_is_the_flag_it_names(key: str, value: str, flags: list[str]) -> None:
    assert as_flags(key, value) == flags


def test_a_preset_key_that_names_nothing_or_a_flag_that_is_not_true_or_false_is_refused() -> None:
    with pytest.raises(SettingsError, match="'no-such-flag' is not an option"):
        preset_argv({"no-such-flag": "1"})
    with pytest.raises(SettingsError, match="not true or false"):
        as_flags("jinja", "maybe")


def folder_of_models(root: Path) -> Path:
    folder = root / "models"
    (folder / "vlm").mkdir(parents=True)
    (folder / "split").mkdir()
    for name in ("plain.gguf", "mmproj-stray.gguf", "loose-00002-of-00002.gguf", "notes.txt",
                 "vlm/model-Q4.gguf", "vlm/mmproj-F16.gguf",
                 "split/big-00001-of-00002.gguf", "split/big-00002-of-00002.gguf"):
        (folder / name).write_bytes(b"GGUF")
    (folder / "empty").mkdir()
    return folder


def test_a_folder_holds_a_model_per_file_and_per_subfolder(tmp_path: Path) -> None:
    catalog = load_catalog(str(folder_of_models(tmp_path)), None)
    assert sorted(catalog) == ["plain", "split", "vlm"]
    assert catalog["plain"].model_argv == ("--model", str(tmp_path / "models/plain.gguf"))
    assert catalog["vlm"].model_argv == ("--model", str(tmp_path / "models/vlm/model-Q4.gguf"),
                                         "--mmproj", str(tmp_path / "models/vlm/mmproj-F16.gguf"))
    assert catalog["split"].path.endswith("big-00001-of-00002.gguf")
    assert {entry.source for entry in catalog.values()} == {"models_dir"}
    with pytest.raises(CatalogError, match="does not exist"):
        load_catalog(str(tmp_path / "nowhere"), None)


def test_a_preset_file_sets_every_model_then_each_its_own(tmp_path: Path) -> None:
    preset = tmp_path / "presets.ini"
    preset.write_text("version = 1\n[*]\nc = 4096\nport = 1\n\n[plain]\nctx-size = 1024\nload-on-startup = true\n"
                      "\n[extra]\nmodel = /elsewhere/extra.gguf\nLLAMA_ARG_EMBEDDINGS = true\nstop-timeout = 2.5\n")
    catalog = load_catalog(str(folder_of_models(tmp_path)), str(preset))
    plain, extra, vlm = catalog["plain"], catalog["extra"], catalog["vlm"]
    assert plain.argv() == ["--ctx-size", "1024"] and plain.load_on_startup and plain.source == "preset"
    assert vlm.argv() == ["--ctx-size", "4096"] and not vlm.load_on_startup  # [*] reaches the folder's models
    assert extra.model_argv == ("--model", "/elsewhere/extra.gguf") and extra.stop_timeout == 2.5
    assert extra.argv() == ["--ctx-size", "4096", "--embeddings"]  # port: the router's own, dropped


@pytest.mark.parametrize(("text", "message"), [
    ("[lost]\nc = 1\n", r"\[lost\]: no such model in --models-dir, and no model or hf-repo key"),
    ("[*]\nbogus = 1\n", r"\[\*\]: 'bogus' is not an option"),
    ("[m]\nmodel = /m.gguf\nstop-timeout = soon\n", r"\[m\]: stop-timeout is not a number"),
    ("[m\nmodel = x\n", "--models-preset"),
])
def test_a_preset_file_that_cannot_be_served_names_its_section(tmp_path: Path, text: str, message: str) -> None:
    preset = tmp_path / "presets.ini"
    preset.write_text(text)
    with pytest.raises(CatalogError, match=message):
        load_catalog(None, str(preset))


class FakeProcess:
    """A child process that lives until it is signalled, or ``crash`` ends it."""

    def __init__(self, on_end: Callable[[], None]) -> None:
        self.returncode: int | None = None
        self.signals: list[int] = []
        self._on_end = on_end
        self.pid = 1

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode or 0

    def send_signal(self, number: int) -> None:
        self.signals.append(number)
        self.end(0)

    def kill(self) -> None:
        self.signals.append(signal.SIGKILL)
        self.end(-signal.SIGKILL)

    def end(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            threading.Thread(target=self._on_end).start()


class FakeSpawner:
    """Children that are ready as soon as they start."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.children: dict[str, Child] = {}

    def start(self, entry: ModelEntry, on_ready: Callable[[Child], None], on_exit: Callable[[Child], None]) -> Child:
        holder: list[Child] = []
        process = FakeProcess(lambda: on_exit(holder[0]))
        child = Child(entry.name, cast(Any, process), 1, "key", ["python", "-m", "app"],
                      Connections("127.0.0.1", 1, None))
        holder.append(child)
        self.started.append(entry.name)
        self.children[entry.name] = child
        threading.Thread(target=on_ready, args=(child,)).start()
        return child


def models(*names: str, models_max: int = 0, stop_timeout: float = 10.0) -> tuple[RouterModels, FakeSpawner]:
    spawner = FakeSpawner()
    catalog = {name: ModelEntry(name, "models_dir", ("--model", f"/{name}.gguf"), stop_timeout=stop_timeout)
               for name in names}
    return RouterModels(catalog, cast(Spawner, spawner), models_max), spawner


def signals_of(spawner: FakeSpawner, name: str) -> list[int]:
    return cast(FakeProcess, spawner.children[name].process).signals


def never() -> bool:
    return False


def status(router: RouterModels, name: str) -> str:
    state = router.state(name)
    assert state is not None
    return state.status


def wait_for(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_request_loads_its_model_and_models_max_unloads_the_least_recently_used() -> None:
    router, spawner = models("a", "b", "c", models_max=2)
    for name in ("a", "b"):
        router.acquire(name, True, never)
        router.release(name)
    router.acquire("a", True, never)  # a is now the more recently used
    router.release("a")
    router.acquire("c", True, never)
    router.release("c")
    assert [status(router, name) for name in ("a", "b", "c")] == ["loaded", "unloaded", "loaded"]
    b = router.state("b")
    assert b is not None and not b.failed and signals_of(spawner, "b") == [signal.SIGTERM]


def test_a_model_serving_a_request_is_never_the_one_unloaded() -> None:
    router, spawner = models("a", "b", models_max=1)
    router.acquire("a", True, never)  # held
    waiting = threading.Thread(target=lambda: router.acquire("b", True, never))
    waiting.start()
    time.sleep(0.3)
    assert status(router, "a") == "loaded" and spawner.started == ["a"]  # b waits for room
    router.release("a")
    waiting.join(10)
    assert status(router, "b") == "loaded" and status(router, "a") == "unloaded"


def test_an_unload_waits_for_the_models_requests() -> None:
    router, spawner = models("a")
    router.acquire("a", True, never)
    router.unload("a")
    time.sleep(0.3)
    assert signals_of(spawner, "a") == []  # still serving
    with pytest.raises(InvalidRequestError, match="model is not running"):
        router.unload("a")
    router.release("a")
    wait_for(lambda: status(router, "a") == "unloaded")
    assert signals_of(spawner, "a") == [signal.SIGTERM]


def test_an_unload_ends_the_child_after_its_stop_timeout() -> None:
    router, spawner = models("a", stop_timeout=0.2)
    router.acquire("a", True, never)
    router.unload("a")
    wait_for(lambda: status(router, "a") == "unloaded")
    assert signals_of(spawner, "a") == [signal.SIGKILL]
    state = router.state("a")
    assert state is not None and not state.failed  # asked for


def test_a_crash_is_reported_and_the_next_request_loads_the_model_again() -> None:
    router, spawner = models("a")
    router.acquire("a", True, never)
    router.release("a")
    cast(FakeProcess, spawner.children["a"].process).end(-signal.SIGKILL)
    wait_for(lambda: status(router, "a") == "unloaded")
    state = router.state("a")
    assert state is not None and state.failed and state.exit_code == 128 + signal.SIGKILL
    router.acquire("a", True, never)
    assert status(router, "a") == "loaded" and spawner.started == ["a", "a"]
    state = router.state("a")
    assert state is not None and not state.failed


def test_what_a_request_for_a_model_that_is_not_loaded_or_unknown_gets() -> None:
    router, _ = models("a")
    with pytest.raises(InvalidRequestError, match="model is not loaded"):
        router.acquire("a", False, never)
    with pytest.raises(InvalidRequestError, match="model 'z' not found"):
        router.acquire("z", True, never)
    router.load("a")
    with pytest.raises(InvalidRequestError, match="model is already running"):
        router.load("a")


def test_a_request_whose_client_left_stops_waiting_for_its_model() -> None:
    router, _ = models("a", "b", models_max=1)
    router.acquire("a", True, never)
    with pytest.raises(ServerError, match="request cancelled while waiting for model name=b"):
        router.acquire("b", True, lambda: True)


def test_the_models_loaded_at_start() -> None:
    entries = {name: ModelEntry(name, "preset", (), load_on_startup=name == "m") for name in ("z", "m", "a")}
    assert startup_models(entries, 4, on_vertex=False) == ["m"]
    assert startup_models(entries, 4, on_vertex=True) == ["m"]
    unmarked = {name: ModelEntry(name, "models_dir", ()) for name in ("z", "m", "a")}
    assert startup_models(unmarked, 4, on_vertex=False) == []
    assert startup_models(unmarked, 2, on_vertex=True) == ["a", "m"]  # Vertex AI: healthy only with a model
    assert startup_models(unmarked, 0, on_vertex=True) == ["a", "m", "z"]
