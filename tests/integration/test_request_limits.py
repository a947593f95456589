"""Per-request costs the engine thread pays at every token are bounded (app/handlers/request_limits.py):
past a bound a request is a 400 naming the field and the limit, in every dialect; at the bound it is
served; the server stays up either way."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from app.handlers.request_limits import MAX_LOGIT_BIAS, MAX_N_PROBS, MAX_STOP_CHARACTERS, MAX_STOP_STRINGS
from tests.integration.conftest import Server

MSG = [{"role": "user", "content": "Hi"}]
STOPS = [f"stop-{i}" for i in range(MAX_STOP_STRINGS + 1)]


@pytest.mark.parametrize(("path", "body", "field", "limit"), [
    ("/completion", {"prompt": "x", "n_predict": 2, "n_probs": MAX_N_PROBS + 1}, "n_probs", MAX_N_PROBS),
    ("/completion", {"prompt": "x", "n_predict": 2, "stop": STOPS}, "stop", MAX_STOP_STRINGS),
    ("/completion", {"prompt": "x", "n_predict": 2, "stop": ["z" * (MAX_STOP_CHARACTERS + 1)]}, "stop",
     MAX_STOP_CHARACTERS),
    ("/v1/chat/completions", {"messages": MSG, "max_tokens": 2, "stop": STOPS}, "stop", MAX_STOP_STRINGS),
    ("/v1/chat/completions", {"messages": MSG, "max_tokens": 2,
                              "logit_bias": {str(token): -1 for token in range(MAX_LOGIT_BIAS + 1)}},
     "logit_bias", MAX_LOGIT_BIAS),
    ("/completion", {"prompt": "x", "n_predict": 2, "logit_bias": [["a b c d " * 600, -1.0]]}, "logit_bias",
     MAX_LOGIT_BIAS),
    ("/v1/messages", {"model": "m", "max_tokens": 2, "messages": MSG, "stop_sequences": STOPS}, "stop",
     MAX_STOP_STRINGS),
])
def test_a_cost_past_its_bound_is_a_400_naming_it(vertex_server: Server, path: str, body: dict[str, Any],
                                                   field: str, limit: int) -> None:
    response = requests.post(vertex_server.url(path), json=body, timeout=60)
    assert response.status_code == 400, response.text[:300]
    message = response.json()["error"]["message"]
    assert f"'{field}'" in message and str(limit) in message, message


def test_at_the_bounds_a_request_is_served(vertex_server: Server) -> None:
    body = {"prompt": "Hello", "n_predict": 2, "n_probs": MAX_N_PROBS, "stop": STOPS[:-1],
            "logit_bias": [[token, -0.5] for token in range(MAX_LOGIT_BIAS)]}
    response = requests.post(vertex_server.url("/completion"), json=body, timeout=120)
    assert response.status_code == 200, response.text[:300]
    probabilities = response.json()["completion_probabilities"]
    assert probabilities and all(len(step["top_logprobs"]) == MAX_N_PROBS for step in probabilities)
    assert requests.get(vertex_server.url("/health"), timeout=30).status_code == 200
