"""/slots shows what llama-server's shows by default: a slot's sampling numbers, never what its user
sent (grammar, stop strings, logit bias, DRY breakers); the whole request only with --slots-debug."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import requests

from app.handlers.shapes import SLOT_METRICS_FIELDS
from tests.integration.conftest import Server, start

PRIVATE = {"grammar": 'root ::= "secret-enum-value" | "other"', "stop": ["private-stop"],
           "logit_bias": [[17, -3.5]], "dry_sequence_breakers": ["private-breaker"]}


def last_params(server: Server) -> dict[str, Any]:
    body = {"prompt": "Say it", "n_predict": 2, "temperature": 0.3, **PRIVATE}
    assert requests.post(server.url("/completion"), json=body, timeout=120).status_code == 200
    server.wait_slots_idle()
    slots: list[dict[str, Any]] = requests.get(server.url("/slots"), timeout=30).json()
    used = [slot["params"] for slot in slots if "params" in slot and slot["params"]["temperature"] == 0.3]
    assert used, slots
    params: dict[str, Any] = used[0]
    return params


def test_by_default_slots_show_no_users_request(vertex_server: Server) -> None:
    params = last_params(vertex_server)
    assert set(params) <= set(SLOT_METRICS_FIELDS)
    assert params["n_predict"] == 2 and "top_k" in params and "samplers" in params
    shown = str(requests.get(vertex_server.url("/slots"), timeout=30).json())
    for secret in ("secret-enum-value", "private-stop", "private-breaker", "-3.5"):
        assert secret not in shown


def test_slots_debug_shows_the_whole_request(tmp_path: Path) -> None:
    server = start(tmp_path, ["-np", "1", "-c", "1024", "--slots-debug"])
    try:
        params = last_params(server)
        assert params["grammar"] == PRIVATE["grammar"] and params["stop"] == ["private-stop"]
        assert params["logit_bias"] == [{"token": 17, "bias": -3.5}]
    finally:
        assert server.stop() == 0, server.log()
