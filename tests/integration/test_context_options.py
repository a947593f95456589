"""llama-server's context options on a real server: the KV cache types (-ctk/-ctv) change how many
bytes a slot's state takes, and RoPE/YaRN overrides (--rope-freq-base, --rope-scaling, ...)
reach the model (its greedy answer changes). One server at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.conftest import launch, start

PROMPT = "Explain, in two sentences, why the sky looks blue during the day and red at sunset."


def ask(base: Any, content: str) -> str:
    response = requests.post(base.url("/v1/chat/completions"), timeout=120, json={
        "messages": [{"role": "user", "content": content}], "max_tokens": 24, "temperature": 0})
    assert response.status_code == 200, response.text[:300]
    text: str = response.json()["choices"][0]["message"]["content"]
    return text


def state_bytes(server_dir: Path, args: list[str]) -> tuple[float, str]:
    """The prompt cache's bytes for one prompt pushed out of the only slot, and the prompt's answer."""
    server = start(server_dir, ["-np", "1", "-c", "1024", "--cache-ram", "64", "--metrics", *args])
    try:
        answer = ask(server, PROMPT)
        ask(server, "Something else entirely, please.")
        metrics = requests.get(server.url("/metrics"), timeout=10).text
        kept = float(next(line.split()[1] for line in metrics.splitlines()
                          if line.startswith("llamacpp:prompt_cache_bytes ")))
    finally:
        assert server.stop() == 0, server.log()
    return kept, answer


def test_a_quantized_kv_cache_takes_fewer_bytes(server_dir: Path) -> None:
    f16, _ = state_bytes(server_dir, [])
    q8, answer = state_bytes(server_dir, ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"])
    assert answer  # it still answers
    assert 0 < q8 < 0.7 * f16  # q8_0 is 8.5 bits a value against f16's 16


def test_a_quantized_v_cache_without_flash_attention_is_refused(server_dir: Path) -> None:
    stopped = launch(server_dir, ["-ctv", "q4_0", "-fa", "off"])
    assert stopped.process.wait(60) == 2
    assert "needs flash attention" in stopped.log()


@pytest.mark.parametrize("args", [["--rope-freq-base", "100"], ["--rope-scaling", "linear", "--rope-scale", "4"]])
def test_rope_overrides_reach_the_model(server_dir: Path, args: list[str]) -> None:
    answers = []
    for extra in ([], args):
        server = start(server_dir, ["-np", "1", "-c", "1024", *extra])
        try:
            answers.append(ask(server, PROMPT))
            assert ask(server, PROMPT) == answers[-1]  # greedy: the same twice on one server
        finally:
            assert server.stop() == 0, server.log()
    assert answers[0] != answers[1]


def test_the_weights_file_type_is_reported(vertex_server: Any) -> None:
    props = requests.get(vertex_server.url("/props"), timeout=10).json()
    models = requests.get(vertex_server.url("/v1/models"), timeout=10).json()
    assert props["model_ftype"] == models["data"][0]["meta"]["ftype"] == "Q4_1"  # the embedded SmolLM2's


@pytest.mark.parametrize("shift", [False, True])
def test_context_shift_lets_a_generation_run_past_its_slot(server_dir: Path, shift: bool) -> None:
    server = start(server_dir, ["-np", "1", "-c", "256", *(["--context-shift", "--keep", "8"] if shift else [])])
    try:
        body = requests.post(server.url("/completion"), timeout=300, json={
            "prompt": "Count upwards from one, one number a line:", "n_predict": 400, "ignore_eos": True,
            "temperature": 0}).json()
        assert body["truncated"] is True
        if shift:
            assert body["tokens_predicted"] == 400 and body["generation_settings"]["n_keep"] == 8
        else:
            assert body["tokens_predicted"] < 256
        assert requests.get(server.url("/health"), timeout=10).status_code == 200
    finally:
        assert server.stop() == 0, server.log()


def test_the_templates_caps_are_reported(vertex_server: Any) -> None:
    caps = requests.get(vertex_server.url("/props"), timeout=10).json()["chat_template_caps"]
    assert caps["supports_system_role"] is True and caps["supports_string_content"] is True
    assert caps["supports_tools"] is False  # SmolLM2's template has no tools section (tools go in a system message)
