"""Every streaming route, in process on the fake backend: what fails before the first token is a
plain HTTP error (never a 200 and an error event), and a character cut by the token limit is
dropped, never sent as U+FFFD."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.engine import SamplingParams
from app.handlers.params import GenerationFields, sampling_params
from app.handlers.sampling import DIRECT
from app.server.wiring import Application
from tests.inprocess import JAPANESE, N_CTX_SEQ, POISON, PROMPT


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], **extra}


STREAMING: dict[str, Callable[[str, dict[str, Any]], dict[str, Any]]] = {
    "/completion": lambda text, extra: {"prompt": text, **extra},
    "/completions": lambda text, extra: {"prompt": text, **extra},
    "/v1/completions": lambda text, extra: {"prompt": text, **extra},
    "/infill": lambda text, extra: {"input_prefix": "def f(", "input_suffix": ")", "prompt": text, **extra},
    "/v1/chat/completions": lambda text, extra: chat(text, **extra),
    "/chat/completions": lambda text, extra: chat(text, **extra),
    "/v1/responses": lambda text, extra: {"input": text, **extra},
    "/v1/messages": lambda text, extra: {"max_tokens": 64, **chat(text), **extra},
}
FAILURES = {
    "a prompt over the context": ("x" * (N_CTX_SEQ + 10), {}, "exceed_context_size_error"),
    "a field of the wrong type": ("Hi", {"temperature": "hot"}, "invalid_request_error"),
    "a grammar that does not parse": ("Hi", {"grammar": "nonsense"}, "invalid_request_error"),
}


NO_GRAMMAR = ("/v1/messages", "/v1/responses")  # their APIs have no grammar field
CASES = [(path, failure) for path in STREAMING for failure in FAILURES
         if not (failure == "a grammar that does not parse" and path in NO_GRAMMAR)]


@pytest.mark.parametrize(("path", "failure"), CASES)
def test_a_stream_that_fails_before_its_first_token_is_a_400(client: FlaskClient, path: str, failure: str) -> None:
    text, extra, error_type = FAILURES[failure]
    response = client.post(path, json=STREAMING[path](text, {"stream": True, **extra}))
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert response.is_json and response.json is not None
    assert response.json["error"]["type"] == error_type


@pytest.mark.parametrize("path", list(STREAMING))
def test_a_stream_whose_first_decode_fails_is_a_500(client: FlaskClient, path: str) -> None:
    response = client.post(path, json=STREAMING[path](POISON + PROMPT, {"stream": True}))
    assert response.status_code == 500, response.get_data(as_text=True)[:300]
    assert response.json is not None and response.json["error"]["type"] == "server_error"


@pytest.mark.parametrize("path", list(STREAMING))
def test_a_good_stream_still_streams(client: FlaskClient, path: str) -> None:
    response = client.post(path, json=STREAMING[path](PROMPT, {"stream": True}))
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    assert streamed_text(response.get_data(as_text=True)) == JAPANESE


def streamed_text(raw: str) -> str:
    """The generated text of a stream, in any of the dialects."""
    pieces = []
    for line in raw.splitlines():
        if not line.startswith("data: {"):
            continue
        data = json.loads(line[6:])
        choice = (data.get("choices") or [{}])[0]
        delta = data.get("delta")
        if "content" in data and "choices" not in data:  # native
            pieces.append(data["content"])
        elif "text" in choice:  # OpenAI completions
            pieces.append(choice["text"])
        elif "delta" in choice:  # OpenAI chat
            pieces.append(choice["delta"].get("content") or "")
        elif data.get("type") == "response.output_text.delta":  # OpenAI Responses
            pieces.append(data["delta"])
        elif isinstance(delta, dict) and delta.get("type") == "text_delta":  # Anthropic Messages
            pieces.append(delta["text"])
    return "".join(pieces)


def limit(path: str, n: int) -> dict[str, Any]:
    if path == "/v1/responses":
        return {"max_output_tokens": n}
    if path in ("/v1/chat/completions", "/v1/messages"):
        return {"max_tokens": n}
    return {"n_predict": n}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ["/completion", "/v1/completions", "/v1/chat/completions", "/v1/responses",
                                  "/v1/messages", "/infill"])
def test_a_character_cut_by_the_token_limit_is_dropped(client: FlaskClient, path: str, stream: bool) -> None:
    """Each cut from 1 to 24 tokens (8 characters of 3 bytes): the text is the whole characters
    generated so far, with no U+FFFD anywhere."""
    encoded = JAPANESE.encode()
    for n in range(1, len(encoded) + 1):
        body = STREAMING[path](PROMPT, {"stream": stream, **limit(path, n)})
        response = client.post(path, json=body)
        assert response.status_code == 200
        raw = response.get_data(as_text=True)
        assert "\ufffd" not in raw and "\\ufffd" not in raw, (n, raw[:400])
        whole = encoded[:n].decode("utf-8", errors="ignore")
        if stream:
            assert streamed_text(raw) == whole, (n, raw[:400])
        else:
            assert whole in raw, (n, raw[:400])


def test_native_completion_keeps_the_cut_bytes_in_the_tokens(client: FlaskClient) -> None:
    body = client.post("/completion", json={"prompt": PROMPT, "n_predict": 4, "return_tokens": True}).json
    assert body is not None
    assert body["content"] == JAPANESE[:1] and len(body["tokens"]) == 4
    assert body["stop_type"] == "limit"


@pytest.mark.parametrize("stream", [False, True])
def test_responses_cut_by_max_output_tokens_are_incomplete(client: FlaskClient, stream: bool) -> None:
    for limit_tokens, status in ((4, "incomplete"), (100, "completed")):
        response = client.post("/v1/responses", json={"input": PROMPT, "max_output_tokens": limit_tokens,
                                                       "stream": stream})
        final = final_response(response.get_data(as_text=True)) if stream else response.json
        assert final is not None and final["status"] == status
        details = {"reason": "max_output_tokens"} if status == "incomplete" else None
        assert final["incomplete_details"] == details
        assert final["output"][0]["status"] == status


def final_response(raw: str) -> dict[str, Any]:
    events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert events[-1]["type"] == f"response.{events[-1]['response']['status']}"
    final: dict[str, Any] = events[-1]["response"]
    return final


def test_the_other_dialects_name_their_stop_reasons(client: FlaskClient) -> None:
    def messages(**extra: Any) -> dict[str, Any]:
        body = client.post("/v1/messages", json={"max_tokens": 64, **chat(PROMPT), **extra}).json
        assert isinstance(body, dict)
        return body

    assert messages()["stop_reason"] == "end_turn"
    assert messages(max_tokens=3)["stop_reason"] == "max_tokens"
    stopped = messages(stop_sequences=["語"])
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", "語")
    assert stopped["content"][0]["text"] == "日本"
    chat_body = client.post("/v1/chat/completions", json=chat(PROMPT, max_tokens=3)).json
    assert chat_body is not None and chat_body["choices"][0]["finish_reason"] == "length"
    chat_body = client.post("/v1/chat/completions", json=chat(PROMPT)).json
    assert chat_body is not None and chat_body["choices"][0]["finish_reason"] == "stop"


def test_a_request_that_sets_nothing_samples_with_the_defaults_props_shows(application: Application) -> None:
    """SamplingParams is the one declaration: an empty request translates to exactly the server's
    defaults, which /props renders field for field."""
    ctx = application.context
    assert sampling_params(ctx, GenerationFields()) == ctx.settings.sampling_defaults
    props = application.flask.test_client().get("/props").json
    assert props is not None
    shown = props["default_generation_settings"]["params"]
    for item in fields(SamplingParams):
        value = getattr(ctx.settings.sampling_defaults, item.name)
        assert shown[item.name] == (list(value) if isinstance(value, tuple) else value), item.name


def test_every_sampling_field_a_request_sets_reaches_the_job(client: FlaskClient) -> None:
    """Each field SamplingParams declares is a request field that lands in the job (echoed back in
    generation_settings), with llama-server's clamps."""
    changed = {"temperature": 0.5, "top_k": 7, "top_p": 0.5, "min_p": 0.2, "typical_p": 0.9,
               "repeat_penalty": 1.1, "presence_penalty": 0.3, "frequency_penalty": 0.4, "repeat_last_n": 32,
               "ignore_eos": True, "min_keep": 2, "dynatemp_range": 0.2, "dynatemp_exponent": 1.5,
               "top_n_sigma": 1.0, "xtc_probability": 0.3, "xtc_threshold": 0.2, "dry_multiplier": 0.5,
               "dry_base": 2.0, "dry_allowed_length": 3, "dry_penalty_last_n": 16, "mirostat": 2,
               "mirostat_tau": 4.0, "mirostat_eta": 0.2, "post_sampling_probs": True, "adaptive_target": 0.3,
               "adaptive_decay": 0.5, "backend_sampling": True}
    assert set(changed) == set(DIRECT)
    body = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, **changed}).json
    assert body is not None
    settings = body["generation_settings"]
    assert {name: settings[name] for name in changed} == changed
    clamped = client.post("/completion", json={"prompt": PROMPT, "n_predict": 1, "temperature": -1, "top_p": 3,
                                               "mirostat": 9, "dry_base": 0.5, "adaptive_decay": 2}).json
    assert clamped is not None
    assert [clamped["generation_settings"][k] for k in ("temperature", "top_p", "mirostat", "dry_base",
                                                        "adaptive_decay")] == [0.0, 1.0, 2, SamplingParams().dry_base,
                                                                               0.99]


