"""Every core endpoint against the real server (gunicorn + llama.cpp + SmolLM2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests

from tests.integration.conftest import Server, free_port, launch, model_in_storage, start, while_loading

CHAT = [{"role": "user", "content": "What is the capital of France?"}]


def post(server: Server, path: str, body: Any, **kwargs: Any) -> requests.Response:
    return requests.post(server.url(path), json=body, timeout=120, **kwargs)


def sse_events(response: requests.Response) -> list[Any]:
    events = []
    for line in response.iter_lines(decode_unicode=True):
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def test_health_answers_503_while_loading_then_200(tmp_path: Path) -> None:
    """A model from Cloud Storage, as on Vertex AI (conftest.model_in_storage): the port answers while
    it downloads and loads."""
    with model_in_storage() as (host, uri):
        server = start(tmp_path, ["-np", "2", "-c", "2048", "--model", uri, "--model-cache-dir", str(tmp_path / "c")],
                       {"AIP_MODE": "PREDICTION", "AIP_HEALTH_ROUTE": "/vertex/health", "AIP_PREDICT_ROUTE": "/predict",
                        "STORAGE_EMULATOR_HOST": host})
        try:
            assert server.startup_statuses[-1] == 200
            assert 503 in server.startup_statuses  # the port answered before the model was loaded
            assert set(server.startup_statuses[:-1]) == {503}
            for body in server.startup_bodies:
                assert body == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
            for path in ("/health", "/v1/health", "/vertex/health"):
                response = requests.get(server.url(path), timeout=10)
                assert response.status_code == 200
        finally:
            assert server.stop() == 0, server.log()
        assert response.json() == {"status": "ok"}


def test_props(vertex_server: Server) -> None:
    props = requests.get(vertex_server.url("/props"), timeout=10).json()
    assert props["total_slots"] == 8
    assert props["default_generation_settings"]["n_ctx"] == 1024
    assert props["default_generation_settings"]["params"]["temperature"] == 0.8
    assert props["model_path"].endswith(".gguf")
    assert "<|im_start|>" in props["chat_template"]
    assert props["endpoint_metrics"] is True and props["endpoint_slots"] is True
    assert props["bos_token"] == "<|im_start|>" and props["eos_token"] == "<|im_end|>"
    assert props["build_info"].startswith("b")
    assert post(vertex_server, "/props", {}).json() == {"success": True}


def test_models(vertex_server: Server) -> None:
    for path in ("/models", "/v1/models"):
        body = requests.get(vertex_server.url(path), timeout=10).json()
        assert body["object"] == "list"
        model = body["data"][0]
        assert model["id"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
        assert model["object"] == "model" and model["owned_by"] == "llamacpp"
        assert model["meta"]["n_ctx"] == 1024
        assert model["meta"]["n_vocab"] == 49152
        assert model["meta"]["n_ctx_train"] == 8192
        assert body["models"][0]["details"]["format"] == "gguf"


def test_tokenize_and_detokenize(vertex_server: Server) -> None:
    text = "Hello world, ünïcode!"
    tokens = post(vertex_server, "/tokenize", {"content": text}).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert post(vertex_server, "/detokenize", {"tokens": tokens}).json() == {"content": text}
    assert post(vertex_server, "/tokenize", {}).json() == {"tokens": []}
    assert post(vertex_server, "/detokenize", {}).json() == {"content": ""}
    special = post(vertex_server, "/tokenize", {"content": "<|im_start|>user"}).json()["tokens"]
    assert special[0] == 1
    literal = post(vertex_server, "/tokenize", {"content": "<|im_start|>", "parse_special": False}).json()
    assert 1 not in literal["tokens"]


def test_tokenize_pieces_fall_back_to_bytes(vertex_server: Server) -> None:
    pieces = post(vertex_server, "/tokenize", {"content": "a 😀", "with_pieces": True}).json()["tokens"]
    assert all(set(piece) == {"id", "piece"} for piece in pieces)
    assert pieces[0]["piece"] == "a"
    as_bytes = [p["piece"] for p in pieces if isinstance(p["piece"], list)]
    assert as_bytes, pieces  # the emoji is split into tokens that are not valid UTF-8 alone
    raw = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert raw.decode() == "a 😀"


def test_apply_template(vertex_server: Server) -> None:
    prompt = post(vertex_server, "/apply-template", {"messages": [{"role": "user", "content": "Hello"}]}).json()
    assert prompt["prompt"].endswith("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")
    closed = post(vertex_server, "/apply-template",
                  {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": False}).json()
    assert closed["prompt"].endswith("Hello<|im_end|>\n")


def test_native_completion(vertex_server: Server) -> None:
    body = post(vertex_server, "/completion", {
        "prompt": "The capital of France is", "n_predict": 12, "temperature": 0, "return_tokens": True,
    }).json()
    assert body["stop"] is True
    assert body["tokens_predicted"] == len(body["tokens"]) <= 12
    assert body["tokens_evaluated"] == len(post(vertex_server, "/tokenize",
                                                {"content": "The capital of France is"}).json()["tokens"])
    assert body["stop_type"] in ("eos", "limit")
    assert body["generation_settings"]["temperature"] == 0
    assert body["generation_settings"]["n_predict"] == 12
    assert body["prompt"] == "The capital of France is"
    assert body["model"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    timings = body["timings"]
    assert timings["predicted_n"] == body["tokens_predicted"]
    assert timings["prompt_n"] + timings["cache_n"] == body["tokens_evaluated"]
    detok = post(vertex_server, "/detokenize", {"tokens": body["tokens"]}).json()["content"]
    assert detok == body["content"]


def test_native_streaming_matches_non_streaming(vertex_server: Server) -> None:
    request = {"prompt": "Once upon a time", "n_predict": 24, "temperature": 0}
    whole = post(vertex_server, "/completions", request).json()
    with post(vertex_server, "/completion", {**request, "stream": True}, stream=True) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = sse_events(response)
    assert "[DONE]" not in events
    chunks, final = events[:-1], events[-1]
    assert all(chunk["stop"] is False and len(chunk["tokens"]) >= 1 for chunk in chunks)
    assert "".join(chunk["content"] for chunk in chunks) == whole["content"]
    assert final["stop"] is True and final["content"] == ""
    assert final["tokens_predicted"] == whole["tokens_predicted"]


def test_stop_strings_and_limits(vertex_server: Server) -> None:
    request = {"prompt": "List the numbers: 1, 2, 3,", "n_predict": 20, "temperature": 0}
    free = post(vertex_server, "/completion", request).json()
    text = free["content"]
    assert len(text) > 6, text
    stop = text[3:6]
    first = text.index(stop)
    stopped = post(vertex_server, "/completion", {**request, "stop": [stop]}).json()
    assert stopped["content"] == text[:first]
    assert stopped["stop_type"] == "word" and stopped["stopping_word"] == stop
    limited = post(vertex_server, "/completion", {**request, "n_predict": 3}).json()
    assert limited["tokens_predicted"] == 3 and limited["stop_type"] == "limit"


def test_several_prompts_answer_an_array(vertex_server: Server) -> None:
    body = post(vertex_server, "/completion", {"prompt": ["Hello", "Goodbye"], "n_predict": 4,
                                               "temperature": 0}).json()
    assert isinstance(body, list) and [item["index"] for item in body] == [0, 1]
    single = post(vertex_server, "/completion", {"prompt": "Goodbye", "n_predict": 4, "temperature": 0}).json()
    assert body[1]["content"] == single["content"]


def test_same_seed_same_text(vertex_server: Server) -> None:
    request = {"prompt": "My favourite colour is", "n_predict": 16, "temperature": 1.0, "seed": 1234}
    first = post(vertex_server, "/completion", request).json()["content"]
    assert post(vertex_server, "/completion", request).json()["content"] == first
    others = {post(vertex_server, "/completion", {**request, "seed": seed}).json()["content"] for seed in (1, 2, 3)}
    assert others != {first}


def test_openai_completions_shape(vertex_server: Server) -> None:
    body = post(vertex_server, "/v1/completions", {"prompt": ["Hi", "Yo"], "max_tokens": 5,
                                                   "temperature": 0}).json()
    assert body["object"] == "text_completion"
    assert body["system_fingerprint"].startswith("b")
    assert [choice["index"] for choice in body["choices"]] == [0, 1]
    assert all(choice["finish_reason"] in ("stop", "length") for choice in body["choices"])
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_chat_completion_shape_and_prompt_cache(vertex_server: Server) -> None:
    request = {"messages": CHAT, "max_tokens": 16, "temperature": 0}
    first = post(vertex_server, "/v1/chat/completions", request).json()
    assert first["object"] == "chat.completion"
    assert first["id"].startswith("chatcmpl-")
    choice = first["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert choice["finish_reason"] in ("stop", "length")
    again = post(vertex_server, "/chat/completions", request).json()
    assert again["choices"][0]["message"]["content"] == choice["message"]["content"]
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == again["timings"]["cache_n"] > 0
    assert again["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"]


def test_chat_streaming_event_sequence(vertex_server: Server) -> None:
    request = {"messages": CHAT, "max_tokens": 12, "temperature": 0, "stream": True,
               "stream_options": {"include_usage": True}}
    with post(vertex_server, "/v1/chat/completions", request, stream=True) as response:
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    first, *middle, final, usage = events[:-1]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert middle and all("role" not in event["choices"][0]["delta"] for event in middle)
    assert final["choices"][0]["delta"] == {} and final["choices"][0]["finish_reason"] in ("stop", "length")
    assert usage["choices"] == [] and "timings" in usage
    assert usage["usage"]["completion_tokens"] == usage["timings"]["predicted_n"]
    assert len({event["id"] for event in events[:-1]}) == 1


def test_assistant_prefill_continues_the_message(vertex_server: Server) -> None:
    messages = [*CHAT, {"role": "assistant", "content": "The capital of France is"}]
    prompt = post(vertex_server, "/apply-template", {"messages": messages}).json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\nThe capital of France is")


def test_metrics(vertex_server: Server) -> None:
    post(vertex_server, "/completion", {"prompt": "Count:", "n_predict": 4})
    response = requests.get(vertex_server.url("/metrics"), timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    text = response.text
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines() if line.startswith("llamacpp:")
    }
    for name in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:n_decode_total",
                 "llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:n_busy_slots_per_decode",
                 "llamacpp:prompt_seconds_total", "llamacpp:tokens_predicted_seconds_total"):
        assert name in values, name
    assert values["llamacpp:tokens_predicted_total"] >= 4
    assert values["llamacpp:n_decode_total"] >= 1
    assert "# TYPE llamacpp:prompt_tokens counter" in text or "# TYPE llamacpp:prompt_tokens_total counter" in text


def test_slots(vertex_server: Server) -> None:
    post(vertex_server, "/completion", {"prompt": "Pinned to slot five", "n_predict": 3, "id_slot": 5})
    slots = requests.get(vertex_server.url("/slots"), timeout=10).json()
    assert [slot["id"] for slot in slots] == list(range(8))
    assert all(slot["n_ctx"] == 1024 for slot in slots)
    five = slots[5]
    assert five["is_processing"] is False
    assert five["params"]["n_predict"] == 3
    assert five["n_prompt_tokens"] >= 4
    # idle: llama-server's release resets the task's counters (its budget and tokens are in params)
    assert five["next_token"][0]["n_decoded"] == 0 and five["next_token"][0]["n_remain"] == -1
    assert five["n_prompt_tokens_processed"] == 0 and five["n_prompt_tokens_cache"] == 0
    assert requests.get(vertex_server.url("/slots?fail_on_no_slot=1"), timeout=10).status_code == 200


def test_cors_preflight(vertex_server: Server) -> None:
    response = requests.options(vertex_server.url("/v1/chat/completions"),
                                headers={"Origin": "https://ui.example", "Access-Control-Request-Method": "POST"},
                                timeout=10)
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == "https://ui.example"
    assert response.headers["Access-Control-Allow-Methods"] == "GET, POST, DELETE, OPTIONS"  # llama-server's


def test_logit_bias_and_ignore_eos_reach_the_sampler(vertex_server: Server) -> None:
    request = {"prompt": "The capital of France is", "n_predict": 6, "temperature": 0, "return_tokens": True}
    free = post(vertex_server, "/completion", request).json()
    banned = free["tokens"][0]
    biased = post(vertex_server, "/completion", {**request, "logit_bias": [[banned, False]]}).json()
    assert banned not in biased["tokens"]
    assert biased["generation_settings"]["logit_bias"] == [{"token": banned, "bias": None}]
    eos_request = {"prompt": "Hi", "n_predict": 40, "temperature": 0}
    natural = post(vertex_server, "/completion", {**eos_request, "n_predict": 400}).json()
    assert natural["stop_type"] == "eos"
    forced = post(vertex_server, "/completion", {**eos_request, "n_predict": natural["tokens_predicted"] + 5,
                                                 "ignore_eos": True}).json()
    assert forced["stop_type"] == "limit"
    assert forced["tokens_predicted"] == natural["tokens_predicted"] + 5


def test_every_sampler_stage_runs_on_the_real_backend(vertex_server: Server) -> None:
    base = {"prompt": "Once upon a time", "n_predict": 6, "seed": 11}
    variants = [
        {"repeat_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.5, "repeat_last_n": 32},
        {"dry_multiplier": 0.8, "dry_penalty_last_n": 10**9},
        {"xtc_probability": 0.5, "xtc_threshold": 0.1},
        {"top_n_sigma": 1.0, "typical_p": 0.9, "dynatemp_range": 0.3},
        {"mirostat": 1}, {"mirostat": 2},
        {"temperature": 0, "repeat_penalty": 1.5, "repeat_last_n": 10**9},
        {"presence_penalty": 3.5e197, "min_p": 2e195},
    ]
    for variant in variants:
        assert isinstance(variant, dict)
        reply = post(vertex_server, "/completion", {**base, **variant})
        assert reply.status_code == 200, (variant, reply.text)
        assert reply.json()["tokens_predicted"] >= 1


def test_live_answers_200_while_the_model_loads_and_after(tmp_path: Path) -> None:
    """/live (the liveness probe's route) is not the loading gate's 503: a container that is still
    downloading its model is alive."""
    port = free_port()
    with model_in_storage() as (host, uri):
        server = launch(tmp_path, ["-np", "1", "-c", "1024", "--model", uri, "--model-cache-dir", str(tmp_path / "c")],
                        {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port), "AIP_PREDICT_ROUTE": "/predict",
                         "STORAGE_EMULATOR_HOST": host}, port=port)
        try:
            seen = while_loading(server, "/live")
            assert seen[-1][0] == 200 and (503, 200) in seen and {live for _, live in seen} == {200}
            assert requests.get(server.url("/live"), timeout=5).json() == {"status": "ok"}
        finally:
            assert server.stop() == 0, server.log()
