"""Router mode with real children: each model of --models-dir and --models-preset runs in a child
instance of this server (the embedded model under two names, and once as an embedding model), reached
only through the router, with the openai SDK and requests as clients."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import Server, start

KEY = "router-secret"
AUTH = {"Authorization": f"Bearer {KEY}"}
WAIT_SECONDS = 120


def models_folder(root: Path) -> Path:
    """chat-a.gguf (a file) and chat-b/ (a folder holding a model), both the embedded model."""
    folder = root / "models"
    (folder / "chat-b").mkdir(parents=True)
    (folder / "chat-a.gguf").symlink_to(embedded_model_path())
    (folder / "chat-b" / "model.gguf").symlink_to(embedded_model_path())
    return folder


def preset_file(root: Path) -> Path:
    """All three levels: [*] for every model, a model's own section, and (on the command line) --parallel."""
    path = root / "presets.ini"
    (root / "embed.gguf").symlink_to(embedded_model_path())
    path.write_text(f"""version = 1
; every model
[*]
c = 4096
temp = 0.25

[chat-a]
; this model's own: its context wins over [*]'s; its parallel loses to the command line's
c = 1024
np = 4

[embed]
model = {root / 'embed.gguf'}
embeddings = true
LLAMA_ARG_POOLING = mean
""")
    return path


def wait_for(check: Callable[[], bool], what: str, seconds: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def listed(server: Server) -> dict[str, dict[str, Any]]:
    reply = requests.get(server.url("/models"), headers=AUTH, timeout=30)
    assert reply.status_code == 200, reply.text
    return {model["id"]: model for model in reply.json()["data"]}


def status_of(server: Server, name: str) -> dict[str, Any]:
    status: dict[str, Any] = listed(server)[name]["status"]
    return status


def child_processes(alias: str, under: Path | None = None) -> list[int]:
    """The pids of a model's child (its gunicorn master and worker), found by its command line (a model
    file ``under`` a folder, where given: each test's router has its own)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--alias" in words and words[words.index(b"--alias") + 1] == alias.encode() and b"app" in words and (
                under is None or any(word.startswith(str(under).encode()) for word in words)):
            pids.append(int(entry.name))
    return pids


def chat(server: Server, model: str, tokens: int = 4, **extra: Any) -> requests.Response:
    return requests.post(server.url("/v1/chat/completions"), headers=AUTH, timeout=WAIT_SECONDS, json={
        "model": model, "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": tokens,
        "temperature": 0, **extra})


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("router")
    server = start(root, ["--models-dir", str(models_folder(root)), "--models-preset", str(preset_file(root)),
                          "-t", "1", "--parallel", "2", "--api-key", KEY, "--metrics", "--tools", "get_info"])
    yield server
    assert server.stop() == 0, server.log()
    for name in ("chat-a", "chat-b", "embed"):
        assert child_processes(name, root) == [], f"{name}'s child outlived the router"


def test_the_router_lists_every_model_of_its_sources_before_loading_any(router: Server) -> None:
    health = requests.get(router.url("/health"), timeout=10)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    models = listed(router)
    assert set(models) == {"chat-a", "chat-b", "embed"}
    assert models["chat-b"]["source"] == "models_dir" and models["embed"]["source"] == "preset"
    assert models["chat-b"]["path"].endswith("chat-b/model.gguf")
    assert all(model["status"]["value"] == "unloaded" and "failed" not in model["status"] for model in models.values())
    props = requests.get(router.url("/props"), headers=AUTH, timeout=10).json()
    assert props["role"] == "router" and props["max_instances"] == 4 and props["models_autoload"] is True


def test_preset_precedence_command_line_then_model_section_then_global(router: Server) -> None:
    props = requests.get(router.url("/props"), params={"model": "chat-a"}, headers=AUTH, timeout=WAIT_SECONDS).json()
    assert props["model_alias"] == "chat-a"
    assert props["total_slots"] == 2  # --parallel 2 (command line) over np = 4 ([chat-a])
    assert props["default_generation_settings"]["n_ctx"] == 1024 // 2  # c = 1024 ([chat-a]) over c = 4096 ([*])
    assert props["default_generation_settings"]["params"]["temperature"] == 0.25  # temp = 0.25 ([*])
    other = requests.get(router.url("/props"), params={"model": "chat-b"}, headers=AUTH, timeout=WAIT_SECONDS).json()
    assert other["default_generation_settings"]["n_ctx"] == 4096 // 2  # [*] alone


def test_concurrent_chats_to_two_models_through_the_openai_sdk(router: Server) -> None:
    client = openai.OpenAI(base_url=router.url("/v1"), api_key=KEY, max_retries=0)
    answers: dict[str, list[str]] = {}

    def stream(model: str) -> None:
        chunks = client.chat.completions.create(model=model, stream=True, max_tokens=6, temperature=0,
                                                messages=[{"role": "user", "content": "Count to five"}])
        answers[model] = [chunk.model for chunk in chunks]

    threads = [threading.Thread(target=stream, args=(model,)) for model in ("chat-a", "chat-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_SECONDS)
    assert set(answers) == {"chat-a", "chat-b"}
    for model, names in answers.items():
        assert len(names) > 2 and set(names) == {model}
    models = listed(router)
    assert models["chat-a"]["status"]["value"] == models["chat-b"]["status"]["value"] == "loaded"
    assert models["chat-a"]["owned_by"] == "llamacpp" and "meta" in models["chat-a"]  # the child's own entry


def test_the_embedding_model_of_the_preset_embeds_and_refuses_chat(router: Server) -> None:
    first = requests.post(router.url("/v1/embeddings"), headers=AUTH, timeout=WAIT_SECONDS,
                          json={"model": "embed", "input": ["a red apple", "a red apple"]})
    assert first.status_code == 200, first.text
    vectors = [item["embedding"] for item in first.json()["data"]]
    assert len(vectors[0]) > 100 and vectors[0] == vectors[1]
    refused = chat(router, "embed")
    assert refused.status_code == 501 and refused.json()["error"]["type"] == "not_supported_error"


def test_requests_name_their_model_as_llama_server_asks(router: Server) -> None:
    missing = requests.post(router.url("/v1/chat/completions"), headers=AUTH, timeout=10,
                            json={"messages": [{"role": "user", "content": "hi"}]})
    assert missing.status_code == 400
    assert missing.json()["error"]["message"] == "model name is missing from the request"
    unknown = chat(router, "no-such-model")
    assert unknown.status_code == 400 and unknown.json()["error"]["message"] == "model 'no-such-model' not found"
    metrics = requests.get(router.url("/metrics"), headers=AUTH, timeout=10)
    assert metrics.status_code == 400 and "missing" in metrics.json()["error"]["message"]
    per_model = requests.get(router.url("/metrics"), params={"model": "chat-a"}, headers=AUTH, timeout=WAIT_SECONDS)
    assert per_model.status_code == 200 and "llamacpp:prompt_tokens_total" in per_model.text
    tokens = requests.post(router.url("/tokenize"), headers=AUTH, timeout=WAIT_SECONDS,
                           json={"model": "chat-a", "content": "Hello"})
    assert tokens.status_code == 200 and tokens.json()["tokens"]


def test_the_api_key_is_the_routers_and_the_children_are_not_reachable_with_it(router: Server) -> None:
    assert chat(router, "chat-a").status_code == 200
    no_key = requests.post(router.url("/v1/chat/completions"), timeout=10, json={"model": "chat-a", "messages": []})
    assert no_key.status_code == 401
    args = status_of(router, "chat-a")["args"]
    assert KEY not in json.dumps(args) and args[args.index("--host") + 1] == "127.0.0.1"
    child = f"http://127.0.0.1:{args[args.index('--port') + 1]}"
    for headers in ({}, AUTH):
        direct = requests.post(child + "/v1/chat/completions", headers=headers, timeout=10,
                               json={"model": "chat-a", "messages": [{"role": "user", "content": "hi"}]})
        assert direct.status_code == 401


def test_load_and_unload_routes_and_the_states_they_leave(router: Server) -> None:
    assert chat(router, "chat-b").status_code == 200
    unload = requests.post(router.url("/models/unload"), headers=AUTH, json={"model": "chat-b"}, timeout=30)
    assert unload.status_code == 200 and unload.json() == {"success": True}
    wait_for(lambda: status_of(router, "chat-b")["value"] == "unloaded", "chat-b to unload")
    assert "failed" not in status_of(router, "chat-b")
    again = requests.post(router.url("/models/unload"), headers=AUTH, json={"model": "chat-b"}, timeout=30)
    assert again.status_code == 400 and again.json()["error"]["message"] == "model is not running"
    not_loaded = requests.post(router.url("/v1/chat/completions?autoload=false"), headers=AUTH, timeout=10,
                               json={"model": "chat-b", "messages": [{"role": "user", "content": "hi"}]})
    assert not_loaded.status_code == 400 and not_loaded.json()["error"]["message"] == "model is not loaded"
    load = requests.post(router.url("/models/load"), headers=AUTH, json={"model": "chat-b"}, timeout=30)
    assert load.status_code == 200 and load.json() == {"success": True}
    wait_for(lambda: status_of(router, "chat-b")["value"] == "loaded", "chat-b to load")
    twice = requests.post(router.url("/models/load"), headers=AUTH, json={"model": "chat-b"}, timeout=30)
    assert twice.status_code == 400 and twice.json()["error"]["message"] == "model is already running"
    unknown = requests.post(router.url("/models/load"), headers=AUTH, json={"model": "nope"}, timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"


def test_a_client_that_leaves_a_stream_cancels_the_childs_generation(router: Server) -> None:
    def busy_slots() -> int:
        slots = requests.get(router.url("/slots"), params={"model": "chat-b"}, headers=AUTH, timeout=30).json()
        return sum(1 for slot in slots if slot["is_processing"])

    assert chat(router, "chat-b").status_code == 200
    reply = requests.post(router.url("/v1/chat/completions"), headers=AUTH, stream=True, timeout=WAIT_SECONDS, json={
        "model": "chat-b", "stream": True, "max_tokens": 2000, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Write a long story"}]})
    next(line for line in reply.iter_lines() if line.startswith(b"data: "))
    assert busy_slots() == 1
    reply.close()
    wait_for(lambda: busy_slots() == 0, "the child to cancel the abandoned generation", seconds=30)


def test_a_child_killed_mid_stream_is_reported_and_loaded_again(router: Server) -> None:
    assert chat(router, "chat-a").status_code == 200
    reply = requests.post(router.url("/v1/chat/completions"), headers=AUTH, stream=True, timeout=WAIT_SECONDS, json={
        "model": "chat-a", "stream": True, "max_tokens": 400, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Write a long story"}]})
    assert reply.status_code == 200
    lines = reply.iter_lines()
    first = next(line for line in lines if line.startswith(b"data: "))
    assert b"chat.completion.chunk" in first
    pids = child_processes("chat-a", Path(status_of(router, "chat-a")["args"][-1]).parent)
    assert len(pids) == 2
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    rest = b"\n".join(lines)  # the router ends the stream with an error event
    assert b'"error"' in rest and b"went away" in rest and b"[DONE]" not in rest
    wait_for(lambda: status_of(router, "chat-a").get("failed") is True, "the crash to be reported")
    status = status_of(router, "chat-a")
    assert status["value"] == "unloaded" and status["exit_code"] == 128 + signal.SIGKILL
    again = chat(router, "chat-a")  # autoload starts it again
    assert again.status_code == 200 and again.json()["model"] == "chat-a"
    assert status_of(router, "chat-a")["value"] == "loaded" and "failed" not in status_of(router, "chat-a")


def test_models_max_one_unloads_the_least_recently_used(tmp_path: Path) -> None:
    server = start(tmp_path, ["--models-dir", str(models_folder(tmp_path)), "-t", "1", "-np", "1", "-c", "1024",
                              "--models-max", "1", "--sleep-idle-seconds", "1"])
    try:
        assert chat(server, "chat-a").status_code == 200
        assert chat(server, "chat-b").status_code == 200
        models = {name: model["status"] for name, model in listed(server).items()}
        assert models["chat-b"]["value"] in ("loaded", "sleeping")
        assert models["chat-a"]["value"] == "unloaded" and "failed" not in models["chat-a"]
        assert child_processes("chat-a", tmp_path) == [] and len(child_processes("chat-b", tmp_path)) == 2
        # --sleep-idle-seconds reaches the child: its model is freed, the child stays
        wait_for(lambda: status_of(server, "chat-b")["value"] == "sleeping", "chat-b to sleep", seconds=30)
        assert len(child_processes("chat-b", tmp_path)) == 2
        assert chat(server, "chat-b").status_code == 200  # wakes it
    finally:
        assert server.stop() == 0, server.log()


def test_vertex_predict_fans_instances_out_to_their_models(tmp_path: Path) -> None:
    """AIP_STORAGE_URI with two models starts a router; healthy only once a model is loaded."""
    folder = models_folder(tmp_path)
    server = start(tmp_path, ["-t", "1", "-np", "2", "-c", "1024", "--models-max", "1"],
                   {"AIP_MODE": "PREDICTION", "AIP_STORAGE_URI": str(folder), "AIP_PREDICT_ROUTE": "/predict",
                    "AIP_HEALTH_ROUTE": "/ping"}, path="/ping")
    try:
        assert "serving them as a router" in server.log()
        assert listed(server)["chat-a"]["status"]["value"] == "loaded"  # the first --models-max, by name
        message = [{"role": "user", "content": "Say hi"}]
        reply = requests.post(server.url("/predict"), timeout=WAIT_SECONDS, json={
            "instances": [{"@requestFormat": "chatCompletions", "model": "chat-a", "messages": message},
                          {"messages": message},
                          {"@requestFormat": "chatCompletions", "messages": message, "model": "nope"}],
            "parameters": {"max_tokens": 3}})
        assert reply.status_code == 200, reply.text
        first, second, third = reply.json()["predictions"]
        assert first["model"] == "chat-a" and first["choices"][0]["message"]["content"]
        assert second["error"]["message"] == "model name is missing from the request"
        assert third["error"]["message"] == "model 'nope' not found"
        both = requests.post(server.url("/predict"), timeout=WAIT_SECONDS, json={
            "instances": [{"@requestFormat": "chatCompletions", "messages": message, "model": "chat-b"},
                          {"@requestFormat": "chatCompletions", "messages": message}],
            "parameters": {"max_tokens": 3, "model": "chat-a"}})
        assert [p["model"] for p in both.json()["predictions"]] == ["chat-b", "chat-a"]
    finally:
        assert server.stop() == 0, server.log()


def test_what_a_router_answers_itself_needs_no_model(router: Server) -> None:
    document = requests.get(router.url("/openapi.json"), timeout=10).json()
    assert {"/v1/chat/completions", "/models/load", "/models/unload"} <= set(document["paths"])
    proxy = requests.get(router.url("/cors-proxy"), headers=AUTH, timeout=10)
    assert proxy.status_code == 403 and proxy.json()["error"]["type"] == "feature_disabled"
    # agent mode: the router serves /tools itself, and its children (some loaded by now) start no tools
    assert [entry["tool"] for entry in requests.get(router.url("/tools"), headers=AUTH, timeout=10).json()] == [
        "get_info"]
    info = requests.post(router.url("/tools"), json={"tool": "get_info"}, headers=AUTH, timeout=30).json()
    assert info["os"].startswith("Linux") and info["cwd"]
    assert requests.post(router.url("/tools"), json={"tool": "get_info"}, timeout=30).status_code == 401
    assert router.log().count("security: server tools (experimental) enabled") == 1


def test_reload_reads_the_sources_again(router: Server) -> None:
    folder = Path(listed(router)["chat-b"]["path"]).parent.parent
    (folder / "chat-c.gguf").symlink_to(embedded_model_path())
    try:
        assert "chat-c" not in listed(router)  # known only once the sources are read again
        reloaded = requests.get(router.url("/models"), params={"reload": "1"}, headers=AUTH, timeout=30).json()
        entry = next(model for model in reloaded["data"] if model["id"] == "chat-c")
        assert entry["status"]["value"] == "unloaded" and entry["source"] == "models_dir"
        assert chat(router, "chat-c").json()["model"] == "chat-c"
    finally:
        (folder / "chat-c.gguf").unlink()
    requests.post(router.url("/models/unload"), headers=AUTH, json={"model": "chat-c"}, timeout=30)
    wait_for(lambda: status_of(router, "chat-c")["value"] == "unloaded", "chat-c to unload")
    again = requests.get(router.url("/models"), params={"reload": "1"}, headers=AUTH, timeout=30).json()
    assert "chat-c" not in {model["id"] for model in again["data"]}  # gone from the folder, and unloaded
