"""The server-wide constraints llama-server takes as flags, on the real model: -j/--json-schema
holds every answer that asks for nothing else to the schema, and -l/--logit-bias keeps a token out
of answers that give no logit_bias of their own. One server at a time."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import requests

from tests.integration.conftest import Server, start

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
          "additionalProperties": False}
PROMPT = "What is two plus two?"
TEXT = "Once upon a time, in a small village,"


def chat(server: Server, **fields: Any) -> str:
    response = requests.post(server.url("/v1/chat/completions"), timeout=120, json={
        "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 24, "temperature": 0, **fields})
    assert response.status_code == 200, response.text[:300]
    text: str = response.json()["choices"][0]["message"]["content"]
    return text


def first_token(server: Server, **fields: Any) -> int:
    response = requests.post(server.url("/completion"), timeout=120, json={
        "prompt": TEXT, "n_predict": 1, "temperature": 0, "ignore_eos": True, "return_tokens": True, **fields})
    assert response.status_code == 200, response.text[:300]
    token: int = response.json()["tokens"][0]
    return token


def test_a_default_json_schema_holds_answers_that_ask_for_nothing_else(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "1", "-c", "1024", "-j", json.dumps(SCHEMA)])
    try:
        answer = json.loads(chat(server, max_tokens=64))
        assert set(answer) == {"answer"} and isinstance(answer["answer"], int)
        free = chat(server, response_format={"type": "json_object"}, max_tokens=64)  # the request's own wins
        assert isinstance(json.loads(free), dict)
    finally:
        assert server.stop() == 0, server.log()


def test_a_default_logit_bias_applies_until_a_request_gives_its_own(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "1", "-c", "1024"])
    try:
        greedy = first_token(server)
    finally:
        assert server.stop() == 0, server.log()
    server = start(server_dir, ["-np", "1", "-c", "1024", "-l", f"{greedy}-inf"])
    try:
        assert first_token(server) != greedy
        assert first_token(server, logit_bias={}) == greedy  # a request's logit_bias replaces the server's
    finally:
        assert server.stop() == 0, server.log()


def test_n_predict_is_the_default_budget_and_a_requests_own_wins(tmp_path: Path) -> None:
    """llama-server: -n is the budget of a request that sets none; a request's own n_predict (or
    max_tokens) wins, above -n too."""
    server = start(tmp_path, ["-n", "4", "-np", "1", "-c", "1024"])
    try:
        body = {"prompt": "Once upon a time", "ignore_eos": True}
        default = requests.post(server.url("/completion"), json=body, timeout=120).json()
        own = requests.post(server.url("/completion"), json={**body, "n_predict": 9}, timeout=120).json()
        chat = requests.post(server.url("/v1/chat/completions"), timeout=120, json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 7, "ignore_eos": True}).json()
        assert default["tokens_predicted"] == 4 and own["tokens_predicted"] == 9
        assert chat["usage"]["completion_tokens"] == 7
    finally:
        assert server.stop() == 0, server.log()


def test_the_adaptive_p_sampler_picks_tokens_near_its_target(tmp_path: Path) -> None:
    """--samplers with adaptive_p and --adaptive-target: the chosen tokens are the model's unlikely ones,
    reproducibly for a seed; a request's own samplers (without it) sample as before."""
    server = start(tmp_path, ["-np", "1", "-c", "1024", "--samplers", "penalties;adaptive_p",
                              "--adaptive-target", "0.05", "--adaptive-decay", "0.5"])

    def chosen_probability(**extra: object) -> tuple[float, str]:
        reply = requests.post(server.url("/completion"), timeout=120, json={
            "prompt": "The history of France is", "n_predict": 32, "seed": 3, "n_probs": 1, **extra}).json()
        probabilities = [math.exp(entry["logprob"]) for entry in reply["completion_probabilities"]]
        assert reply["generation_settings"]["adaptive_target"] == extra.get("adaptive_target", 0.05)
        assert reply["generation_settings"]["adaptive_decay"] == 0.5
        return sum(probabilities) / len(probabilities), reply["content"]

    try:
        adaptive, text = chosen_probability()
        assert chosen_probability() == (adaptive, text)  # a seed reproduces it
        greedy, _ = chosen_probability(temperature=0)
        assert adaptive < greedy / 2
        per_request, _ = chosen_probability(samplers=["adaptive_p"], adaptive_target=1.0)
        assert per_request > adaptive  # the request's own target
    finally:
        assert server.stop() == 0, server.log()


def test_ignore_eos_shows_its_bans_in_generation_settings(vertex_server: Server) -> None:
    """As llama-server: ignore_eos is a -inf bias (JSON null) on every end-of-generation token, shown in
    the request's generation_settings beside its own biases; the generation runs to n_predict."""
    eos = requests.post(vertex_server.url("/tokenize"), json={"content": "<|im_end|>"}, timeout=30).json()["tokens"]
    reply = requests.post(vertex_server.url("/completion"), timeout=120, json={
        "prompt": "Hi", "n_predict": 4, "ignore_eos": True, "logit_bias": [[42, 1.5]]}).json()
    biases = reply["generation_settings"]["logit_bias"]
    assert {"token": 42, "bias": 1.5} in biases and {"token": eos[0], "bias": None} in biases
    assert reply["tokens_predicted"] == 4
    plain = requests.post(vertex_server.url("/completion"), timeout=120, json={"prompt": "Hi", "n_predict": 1}).json()
    assert plain["generation_settings"]["logit_bias"] == []
