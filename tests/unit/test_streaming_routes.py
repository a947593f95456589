"""Every streaming route, in process on the fake backend: what fails before the first token is a
plain HTTP error (never a 200 and an error event), and a character cut by the token limit is
dropped, never sent as U+FFFD."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from app.engine.backend import Backend
from app.settings import parse_settings
from app.wiring import Application, build_application
from tests.fakes import FakeBackend, FakeVocabulary, encode

N_CTX_SEQ = 256
JAPANESE = "日本語の文章です"  # 3 bytes a character; the fake vocabulary has a token a byte
PROMPT = "Hi>"  # the fake model answers JAPANESE after the last ">"
POISON = "~"  # a prompt holding it fails its first decode
TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"


class FimVocabulary(FakeVocabulary):
    def special_tokens(self) -> dict[str, int]:
        return {"fim_pre": 3, "fim_suf": 4, "fim_mid": 5}


@pytest.fixture(scope="module")
def application() -> Iterator[Application]:
    def make(config: Any) -> Backend:
        return FakeBackend(reply_for=lambda prompt: JAPANESE, n_seq=config.n_seq,  # type: ignore[return-value]
                           n_ctx_seq=N_CTX_SEQ, n_batch=512, vocab=FimVocabulary(), poison=encode(POISON)[0])

    failures: list[BaseException] = []
    settings = parse_settings(["-np", "2", "-b", "512", "--chat-template", TEMPLATE], {})
    built = build_application(settings, "/models/fake.gguf", None, failures.append, make)
    assert built.context.engine.wait_ready(30) and not failures
    yield built
    built.shutdown()


@pytest.fixture
def client(application: Application) -> FlaskClient:
    return application.flask.test_client()


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], **extra}


STREAMING = {
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
        assert body is not None
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
