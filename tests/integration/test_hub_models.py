"""-hf/--hf-repo through huggingface_hub, against a stand-in of the Hub's API (HF_ENDPOINT): the
quant tag picks the file, the projector beside it comes too, a token reaches a private repository,
and --offline serves the cached copy with the Hub gone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import requests

from app.model_sources.files import embedded_model_path
from tests.hub_standin import hub_standin
from tests.integration.conftest import free_port, launch, start
from tests.projectors import make_vision_projector

TOKEN = "hf_standin_secret"


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hub")
    decoy = folder / "decoy.gguf"
    decoy.write_bytes(b"not a model")
    return {"SmolLM2-135M-Instruct.Q4_1.gguf": embedded_model_path(), "SmolLM2-135M-Instruct.Q8_0.gguf": decoy,
            "mmproj-SmolLM2-f16.gguf": make_vision_projector(folder / "mmproj.gguf"), "README.md": decoy}


def test_a_hub_model_with_its_projector_and_then_offline(server_dir: Path, tmp_path: Path,
                                                        repository: dict[str, Path]) -> None:
    cache = tmp_path / "cache"
    args = ["-hf", "someone/SmolLM2-GGUF:Q4_1", "--model-cache-dir", str(cache), "-np", "1", "-c", "1024"]
    with hub_standin({"someone/SmolLM2-GGUF": repository}, token=TOKEN) as (url, hub):
        refused = launch(server_dir, args, {"HF_ENDPOINT": url})
        assert refused.process.wait(120) == 4  # no token: the model cannot load
        assert "401" in refused.log()
        server = start(server_dir, [*args, "-hft", TOKEN], {"HF_ENDPOINT": url})
        try:
            props = requests.get(server.url("/props"), timeout=10).json()
            assert props["model_path"].startswith(str(cache)) and props["model_path"].endswith(".Q4_1.gguf")
            assert props["modalities"]["vision"] is True  # the projector beside it was fetched too
            reply = requests.post(server.url("/v1/chat/completions"), timeout=120, json={
                "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
            assert reply.status_code == 200
        finally:
            assert server.stop() == 0, server.log()
        assert not any("Q8_0" in line or "README" in line for line in hub.requests)  # only what it needed
    server = start(server_dir, [*args, "--offline"], {"HF_ENDPOINT": "http://127.0.0.1:9"})  # the Hub is gone
    try:
        assert requests.get(server.url("/props"), timeout=10).json()["model_path"].endswith(".Q4_1.gguf")
    finally:
        assert server.stop() == 0, server.log()
    listed = subprocess.run([sys.executable, "-m", "app", "--cache-list", "--model-cache-dir", str(cache)],
                            capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    assert listed[0] == "number of models in cache: 1"  # the model, not its projector
    assert listed[1].strip().startswith("1. someone/SmolLM2-GGUF:") and listed[1].endswith(".Q4_1.gguf")


def test_a_tag_the_repository_lacks_stops_with_the_files_listed(server_dir: Path, tmp_path: Path,
                                                               repository: dict[str, Path]) -> None:
    with hub_standin({"someone/SmolLM2-GGUF": repository}) as (url, _):
        stopped = launch(server_dir, ["-hf", "someone/SmolLM2-GGUF:Q5_K_M", "--model-cache-dir", str(tmp_path)],
                         {"HF_ENDPOINT": url})
        assert stopped.process.wait(120) == 4
    assert "has no GGUF file tagged Q5_K_M" in stopped.log() and "SmolLM2-135M-Instruct.Q4_1.gguf" in stopped.log()


def test_a_llama_server_preset_starts_its_model_with_its_settings(server_dir: Path, tmp_path: Path) -> None:
    """``--gpt-oss-20b-default`` as llama-server takes it: its Hub model and settings, expanded in place (a
    flag before it is overridden, one after it wins)."""
    repository = {"gpt-oss-20b-mxfp4.gguf": embedded_model_path()}
    port = free_port()
    args = ["--temp", "0.5", "--gpt-oss-20b-default", "--port", str(port), "-c", "4096",
            "--model-cache-dir", str(tmp_path / "cache")]
    with hub_standin({"ggml-org/gpt-oss-20b-GGUF": repository}) as (url, hub):
        server = launch(server_dir, args, {"HF_ENDPOINT": url}, port=port)
        try:
            server.wait_healthy()
            props = requests.get(server.url("/props"), timeout=10).json()
            assert props["model_path"].endswith("gpt-oss-20b-mxfp4.gguf") and props["total_slots"] == 2
            settings = props["default_generation_settings"]["params"]
            assert (settings["temperature"], settings["top_p"], settings["top_k"]) == (1.0, 1.0, 0)
            assert abs(settings["min_p"] - 0.01) < 1e-6
            reply = requests.post(server.url("/v1/chat/completions"), timeout=120, json={
                "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
            assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] is not None
        finally:
            assert server.stop() == 0, server.log()
        assert any("gpt-oss-20b-mxfp4.gguf" in line for line in hub.requests)


def test_a_draft_model_from_the_hub_speculates(server_dir: Path, tmp_path: Path, repository: dict[str, Path]) -> None:
    """-hfd/--spec-draft-hf: the draft model fetched as -hf fetches (here the same model, as its own draft)."""
    args = ["-hfd", "someone/SmolLM2-GGUF:Q4_1", "--model-cache-dir", str(tmp_path / "cache"), "-np", "1",
            "-c", "2048"]
    with hub_standin({"someone/SmolLM2-GGUF": repository}) as (url, hub):
        server = start(server_dir, args, {"HF_ENDPOINT": url})
        try:
            reply = requests.post(server.url("/completion"), timeout=120, json={
                "prompt": "One, two, three, four, five,", "n_predict": 16, "temperature": 0}).json()
            assert reply["timings"]["draft_n"] > 0  # draft-simple, from the fetched draft model
            assert requests.get(server.url("/slots"), timeout=10).json()[0]["speculative"] is True
        finally:
            assert server.stop() == 0, server.log()
        assert any(".Q4_1.gguf" in line for line in hub.requests)
