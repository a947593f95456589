"""Embeddings, reranking, LoRA adapters, slot save/restore/erase and idle sleep: the rest of
llama-server's table, on real servers (the reranker and the LoRA adapter are generated)."""

from __future__ import annotations

import base64
import math
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import openai
import pytest
import requests

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import Server, launch, start
from tests.models import make_control_vector, make_lora, make_reranker


@pytest.fixture(scope="module")
def models(server_dir: Path) -> dict[str, Path]:
    return {"lora": make_lora(server_dir / "lora.gguf", embedded_model_path()),
            "reranker": make_reranker(server_dir / "reranker.gguf")}


@pytest.fixture(scope="module")
def server(server_dir: Path, models: dict[str, Path]) -> Iterator[Server]:
    slots = server_dir / "slots"
    slots.mkdir()
    running = start(server_dir, ["-np", "4", "-c", "4096", "--pooling", "mean", "--slot-save-path", str(slots),
                                 "--lora", str(models["lora"]), "--metrics", "--predict-slots"],
                    {"AIP_MODE": "PREDICTION"})
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture(scope="module")
def reranker(server_dir: Path, models: dict[str, Path]) -> Iterator[Server]:
    running = start(server_dir, ["--model", str(models["reranker"]), "--reranking", "-np", "1", "-c", "512"],
                    {"AIP_MODE": "PREDICTION"})
    yield running
    assert running.stop() == 0, running.log()


def post(server: Server, path: str, body: Any) -> requests.Response:
    return requests.post(server.url(path), json=body, timeout=120)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


# ---- embeddings ------------------------------------------------------------------------------


def test_openai_sdk_embeddings_float_and_base64(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url("/v1"), api_key="x", max_retries=0)
    floats = client.embeddings.create(model="m", input=["The cat sat on the mat.", "Dogs bark."],
                                      encoding_format="float")
    assert [item.index for item in floats.data] == [0, 1]
    vector = floats.data[0].embedding
    assert len(vector) == 576
    assert abs(math.sqrt(sum(v * v for v in vector)) - 1.0) < 1e-4  # normalised
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > 0
    decoded = client.embeddings.create(model="m", input="The cat sat on the mat.")  # the SDK asks for base64
    assert max(abs(a - b) for a, b in zip(decoded.data[0].embedding, vector, strict=True)) < 1e-5
    raw = post(server, "/v1/embeddings", {"input": "The cat sat on the mat.", "encoding_format": "base64"}).json()
    data = base64.b64decode(raw["data"][0]["embedding"])
    unpacked = struct.unpack(f"<{len(data) // 4}f", data)
    assert max(abs(a - b) for a, b in zip(unpacked, vector, strict=True)) < 1e-5


def test_embeddings_do_not_depend_on_the_batch(server: Server) -> None:
    alone = post(server, "/v1/embeddings", {"input": "A red bird"}).json()["data"][0]["embedding"]
    again = post(server, "/v1/embeddings", {"input": "A red bird"}).json()["data"][0]["embedding"]
    batch = post(server, "/v1/embeddings", {"input": ["Something else entirely, and longer", "A red bird", "x"]}
                 ).json()["data"][1]["embedding"]
    assert max(abs(a - b) for a, b in zip(alone, again, strict=True)) < 1e-6
    assert max(abs(a - b) for a, b in zip(alone, batch, strict=True)) < 1e-3
    other = post(server, "/v1/embeddings", {"input": "Quantum field theory"}).json()["data"][0]["embedding"]
    assert cosine(alone, batch) > 0.999 > cosine(alone, other)


def test_token_inputs_and_native_embeddings(server: Server) -> None:
    tokens = post(server, "/tokenize", {"content": "A red bird"}).json()["tokens"]
    by_tokens = post(server, "/v1/embeddings", {"input": tokens}).json()["data"][0]["embedding"]
    by_text = post(server, "/v1/embeddings", {"input": "A red bird"}).json()["data"][0]["embedding"]
    assert max(abs(a - b) for a, b in zip(by_tokens, by_text, strict=True)) < 1e-5
    native = post(server, "/embedding", {"content": "A red bird"}).json()
    assert native[0]["index"] == 0 and len(native[0]["embedding"]) == 1  # pooled: one vector
    raw = post(server, "/embeddings", {"input": ["A red bird"], "embd_normalize": -1}).json()[0]["embedding"][0]
    assert abs(math.sqrt(sum(v * v for v in raw)) - 1.0) > 1e-3  # not normalised
    assert cosine(raw, by_text) > 0.9999


def test_chat_and_embeddings_together(server: Server) -> None:
    failures: list[str] = []

    def chat(n: int) -> None:
        reply = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": f"Count {n}"}],
                                                      "max_tokens": 16})
        if reply.status_code != 200:
            failures.append(reply.text)

    def embed(n: int) -> None:
        reply = post(server, "/v1/embeddings", {"input": [f"text {n}", f"more text {n}"]})
        if reply.status_code != 200 or len(reply.json()["data"]) != 2:
            failures.append(reply.text)

    threads = [threading.Thread(target=fn, args=(n,)) for n in range(4) for fn in (chat, embed)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v1/embeddings", {"input": []}, 400, "empty"),
        ("/v1/embeddings", {"input": ""}, 400, "empty"),
        ("/v1/embeddings", {"input": "x", "dimensions": 64}, 400, "dimensions"),
        ("/v1/embeddings", {"input": "x", "encoding_format": "hex"}, 400, "encoding_format"),
        ("/v1/embeddings", {"input": {"a": 1}}, 400, "input"),
        ("/embedding", {}, 400, '"input" or "content" must be provided'),
        ("/v1/embeddings", {"input": "word " * 700}, 400, "exceeds"),
    ],
)
def test_bad_embedding_requests(server: Server, path: str, body: Any, status: int, words: str) -> None:
    response = post(server, path, body)
    assert response.status_code == status, response.text
    assert words in response.json()["error"]["message"]
    if "exceeds" in words:
        error = response.json()["error"]
        assert error["type"] == "exceed_context_size_error" and error["n_ctx"] == 512
        assert error["n_prompt_tokens"] > 512


def test_pooling_none_gives_a_vector_per_token(server_dir: Path) -> None:
    running = start(server_dir, ["--pooling", "none", "-np", "1", "-c", "1024"])
    try:
        tokens = post(running, "/tokenize", {"content": "A red bird"}).json()["tokens"]
        native = post(running, "/embedding", {"content": "A red bird"}).json()
        assert len(native[0]["embedding"]) == len(tokens)
        refused = post(running, "/v1/embeddings", {"input": "A red bird"})
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == (
            "Pooling type 'none' is not OAI compatible. Please use a different pooling type")
    finally:
        running.stop()


# ---- reranking -------------------------------------------------------------------------------


DOCS = ["paris is the capital of france", "the cat sat on the mat", "the blue sky", "a big fish in the sea"]


def test_rerank_orders_by_score_and_maps_indexes(reranker: Server) -> None:
    reply = post(reranker, "/rerank", {"query": "what is the capital of france", "documents": DOCS,
                                       "return_text": True}).json()
    results = reply["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(r["document"]["text"] == DOCS[r["index"]] for r in results)
    assert reply["usage"]["prompt_tokens"] > 0
    for index, document in enumerate(DOCS):
        alone = post(reranker, "/v1/rerank", {"query": "what is the capital of france", "documents": [document]}
                     ).json()["results"][0]
        assert alone["index"] == 0
        assert abs(alone["relevance_score"] - next(r["relevance_score"] for r in results if r["index"] == index)) < 1e-3
    top = post(reranker, "/v1/reranking", {"query": "what is the capital of france", "documents": DOCS,
                                           "top_n": 2}).json()["results"]
    assert [r["index"] for r in top] == [r["index"] for r in results[:2]]
    assert "document" not in top[0]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"documents": DOCS}, '"query" must be provided'),
        ({"query": 5, "documents": DOCS}, '"query" must be a string'),
        ({"query": "q"}, '"documents" must be a non-empty string array'),
        ({"query": "q", "documents": []}, '"documents" must be a non-empty string array'),
        ({"query": "q", "documents": ["ok", 3]}, '"documents" must be a non-empty string array'),
        ({"query": "q", "documents": DOCS, "top_n": 0}, "top_n"),
    ],
)
def test_bad_rerank_requests(reranker: Server, body: Any, words: str) -> None:
    response = post(reranker, "/rerank", body)
    assert response.status_code == 400
    assert words in response.json()["error"]["message"]


def test_reranking_needs_the_flag_and_the_head(server: Server, reranker: Server) -> None:
    off = post(server, "/rerank", {"query": "q", "documents": ["d"]})
    assert off.status_code == 501 and "--reranking" in off.json()["error"]["message"]
    generation = post(reranker, "/completion", {"prompt": "x"})
    assert generation.status_code == 501 and "--embeddings" in generation.json()["error"]["message"]


def test_a_model_without_a_classification_head_cannot_rerank(server_dir: Path) -> None:
    running = start(server_dir, ["--reranking", "-np", "1", "-c", "1024"])
    try:
        response = post(running, "/rerank", {"query": "q", "documents": ["d"]})
        assert response.status_code == 501
        assert "classification head" in response.json()["error"]["message"]
        assert requests.get(running.url("/health"), timeout=10).status_code == 200
    finally:
        running.stop()


def test_rerank_and_embedding_aliases_in_predict(server: Server, reranker: Server) -> None:
    predictions = post(reranker, "/predict", {"instances": [
        {"@requestFormat": "rerank", "query": "capital of france", "documents": DOCS[:2]},
        {"@requestFormat": "reranking", "query": "capital of france", "documents": DOCS[:2]},
    ]}).json()["predictions"]
    assert predictions[0]["results"] == predictions[1]["results"]
    embedded = post(server, "/predict", {"instances": [
        {"@requestFormat": "embedding", "content": "hi"},
        {"@requestFormat": "embeddings", "content": "hi"},
        {"@requestFormat": "/v1/embeddings", "input": "hi"},
        {"@requestFormat": "loraAdapters"},
        {"@requestFormat": "slots"},
    ]}).json()["predictions"]
    assert embedded[0] == embedded[1]  # "embeddings" is the native route (first in the table)
    assert embedded[2]["object"] == "list"
    assert embedded[3][0]["id"] == 0
    assert len(embedded[4]) == 4


# ---- LoRA ------------------------------------------------------------------------------------


def first_token_logprobs(server: Server, **extra: Any) -> list[float]:
    reply = post(server, "/completion", {"prompt": "The capital of France is", "n_predict": 3, "temperature": 0,
                                         "n_probs": 3, **extra}).json()
    return [entry["logprob"] for entry in reply["completion_probabilities"]]


def test_lora_scales_change_the_logits(server: Server) -> None:
    adapters = requests.get(server.url("/lora-adapters"), timeout=10).json()
    assert [(a["id"], a["scale"]) for a in adapters] == [(0, 1.0)] and adapters[0]["path"].endswith("lora.gguf")
    with_lora = first_token_logprobs(server, lora=[{"id": 0, "scale": 1.0}])
    without = first_token_logprobs(server, lora=[{"id": 0, "scale": 0.0}])
    assert with_lora != without
    assert first_token_logprobs(server, lora=[]) == without  # unlisted adapters get 0
    assert first_token_logprobs(server) == with_lora  # the global scale is 1
    try:
        assert post(server, "/lora-adapters", [{"id": 0, "scale": 0.0}]).json() == {"success": True}
        assert requests.get(server.url("/lora-adapters"), timeout=10).json()[0]["scale"] == 0.0
        assert first_token_logprobs(server) == without
    finally:
        post(server, "/lora-adapters", [{"id": 0, "scale": 1.0}])


def test_changing_global_scales_does_not_disturb_a_running_request(server: Server) -> None:
    body = {"prompt": "Write a poem about rain", "n_predict": 80, "temperature": 0, "ignore_eos": True}
    reference = post(server, "/completion", body).json()["content"]
    unadapted = post(server, "/completion", {**body, "lora": []}).json()["content"]
    assert unadapted != reference  # so a request switched to scale 0 midway would show it
    with requests.post(server.url("/completion"), json={**body, "stream": True}, stream=True, timeout=60) as stream:
        lines = stream.iter_lines(decode_unicode=True)
        first = next(line for line in lines if line.startswith("data: "))
        try:
            post(server, "/lora-adapters", [{"id": 0, "scale": 0.0}])
            rest = [line for line in lines if line.startswith("data: ")]
        finally:
            post(server, "/lora-adapters", [{"id": 0, "scale": 1.0}])
    import json

    chunks = [json.loads(line[6:]) for line in [first, *rest]]
    assert "".join(chunk["content"] for chunk in chunks) == reference


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/lora-adapters", {"id": 0, "scale": 1}, "Request body must be an array"),
        ("/lora-adapters", [{"id": 7, "scale": 1}], "no LoRA adapter 7"),
        ("/lora-adapters", [{"id": 0, "scale": "big"}], "scale"),
        ("/completion", {"prompt": "x", "lora": [{"id": 3, "scale": 1}]}, "no LoRA adapter 3"),
        ("/completion", {"prompt": "x", "lora": {"id": 0}}, "lora"),
    ],
)
def test_bad_lora_requests(server: Server, path: str, body: Any, words: str) -> None:
    response = post(server, path, body)
    assert response.status_code == 400
    assert words in response.json()["error"]["message"]


# ---- slots -----------------------------------------------------------------------------------


def slot_action(server: Server, slot: Any, action: str | None, body: Any = None) -> requests.Response:
    query = f"?action={action}" if action else ""
    return requests.post(server.url(f"/slots/{slot}{query}"), json=body or {}, timeout=60)


def test_save_erase_restore_reproduces_the_slot(server: Server) -> None:
    body = {"prompt": "Tell me about the moon landing in 1969", "n_predict": 12, "temperature": 0, "id_slot": 1}
    first = post(server, "/completion", body).json()
    saved = slot_action(server, 1, "save", {"filename": "moon.bin"}).json()
    assert saved["id_slot"] == 1 and saved["filename"] == "moon.bin"
    assert saved["n_saved"] == first["tokens_cached"] and saved["n_written"] > 0
    erased = slot_action(server, 1, "erase").json()
    assert erased == {"id_slot": 1, "n_erased": saved["n_saved"]}
    cold = post(server, "/completion", {**body, "prompt": "Something unrelated"}).json()
    assert cold["timings"]["cache_n"] == 0
    restored = slot_action(server, 1, "restore", {"filename": "moon.bin"}).json()
    assert restored["n_restored"] == saved["n_saved"] and restored["n_read"] == saved["n_written"]
    again = post(server, "/completion", body).json()
    assert again["content"] == first["content"]
    assert again["timings"]["cache_n"] == first["tokens_evaluated"] - 1  # the prompt came back from the file


@pytest.mark.parametrize(
    ("slot", "action", "body", "words"),
    [
        ("abc", "save", {"filename": "x.bin"}, "Invalid slot ID"),
        (-1, "save", {"filename": "x.bin"}, "Invalid slot ID"),
        (99, "save", {"filename": "x.bin"}, "Invalid slot ID"),
        (0, None, {}, "Invalid action"),
        (0, "explode", {}, "Invalid action"),
        (0, "save", {}, "Invalid filename"),
        (0, "save", {"filename": 5}, "Invalid filename"),
        (0, "save", {"filename": "../escape.bin"}, "Invalid filename"),
        (0, "save", {"filename": "/etc/passwd"}, "Invalid filename"),
        (0, "restore", {"filename": "sub/dir.bin"}, "Invalid filename"),
        (0, "restore", {"filename": ".."}, "Invalid filename"),
        (0, "restore", {"filename": "never-saved.bin"}, "Unable to restore slot"),
    ],
)
def test_bad_slot_actions(server: Server, slot: Any, action: str | None, body: Any, words: str) -> None:
    response = slot_action(server, slot, action, body)
    assert response.status_code == 400
    assert words in response.json()["error"]["message"]


def test_a_busy_slot_is_not_restored(server: Server) -> None:
    slot_action(server, 2, "save", {"filename": "empty.bin"})
    body = {"prompt": "A long story", "n_predict": 400, "ignore_eos": True, "stream": True, "id_slot": 2}
    with requests.post(server.url("/completion"), json=body, stream=True, timeout=60) as stream:
        next(line for line in stream.iter_lines() if line.startswith(b"data: "))
        refused = slot_action(server, 2, "restore", {"filename": "empty.bin"})
    assert refused.status_code == 503
    assert "slot 2 is processing" in refused.json()["error"]["message"]


def test_slot_actions_need_a_save_path(vertex_server: Server) -> None:
    response = slot_action(vertex_server, 0, "erase")
    assert response.status_code == 501
    assert "--slot-save-path" in response.json()["error"]["message"]


# ---- idle sleep ------------------------------------------------------------------------------


def metric_values(server: Server) -> dict[str, float]:
    lines = requests.get(server.url("/metrics"), timeout=10).text.splitlines()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("llamacpp:")}


def test_idle_sleep_frees_the_model_and_wakes_on_demand(server_dir: Path) -> None:
    running = start(server_dir, ["--sleep-idle-seconds", "1", "--metrics", "-np", "1", "-c", "1024"])
    try:
        assert post(running, "/completion", {"prompt": "Hi", "n_predict": 4, "ignore_eos": True}).status_code == 200
        deadline = time.monotonic() + 20
        while not requests.get(running.url("/props"), timeout=10).json()["is_sleeping"]:
            assert time.monotonic() < deadline, "the model never went to sleep"
            time.sleep(0.2)
        # /metrics asleep, as llama-server: the window since the last scrape holds the work done before the
        # sleep; the next window holds none (its rates are 0), and the totals stay
        asleep = [metric_values(running) for _ in range(2)]
        assert asleep[0]["llamacpp:predicted_tokens_seconds"] > 0 and asleep[0]["llamacpp:requests_processing"] == 0
        assert asleep[1]["llamacpp:predicted_tokens_seconds"] == 0 == asleep[1]["llamacpp:prompt_tokens_seconds"]
        assert asleep[1]["llamacpp:tokens_predicted_total"] == asleep[0]["llamacpp:tokens_predicted_total"] == 4
        for path in ("/health", "/props", "/metrics", "/v1/models", "/slots"):
            assert requests.get(running.url(path), timeout=10).status_code == 200, path
        assert requests.get(running.url("/props"), timeout=10).json()["is_sleeping"] is True
        assert "freeing the model" in running.log()
        reply = post(running, "/completion", {"prompt": "Hello", "n_predict": 4, "ignore_eos": True})
        assert reply.status_code == 200 and reply.json()["tokens_predicted"] == 4
        assert "loading the model again" in running.log()
    finally:
        running.stop()


def test_lora_init_without_apply_loads_the_adapter_at_scale_zero(models: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    held = start(tmp_path, ["-np", "1", "-c", "1024", "--lora", str(models["lora"]), "--lora-init-without-apply"])
    try:
        adapters = requests.get(held.url("/lora-adapters"), timeout=10).json()
        assert [(a["id"], a["scale"]) for a in adapters] == [(0, 0.0)]
        unapplied = first_token_logprobs(held)
        assert unapplied == first_token_logprobs(held, lora=[{"id": 0, "scale": 0.0}])
        assert unapplied != first_token_logprobs(held, lora=[{"id": 0, "scale": 1.0}])  # loaded, applied on request
        assert post(held, "/lora-adapters", [{"id": 0, "scale": 1.0}]).json() == {"success": True}
        assert first_token_logprobs(held) != unapplied
    finally:
        assert held.stop() == 0, held.log()


def test_control_vectors_steer_the_model(tmp_path: Path) -> None:
    """--control-vector and --control-vector-scaled change the logits by their scale; at scale 0 they
    change nothing; --control-vector-layer-range limits them; a file of the wrong width stops the start."""
    vector = make_control_vector(tmp_path / "steer.gguf", embedded_model_path())

    def logprobs(*args: str) -> list[float]:
        held = start(tmp_path, ["-np", "1", "-c", "1024", *args])
        try:
            return first_token_logprobs(held)
        finally:
            assert held.stop() == 0, held.log()

    plain = logprobs()
    assert logprobs("--control-vector-scaled", f"{vector}:0") == plain
    steered = logprobs("--control-vector", str(vector))
    assert steered != plain
    assert logprobs("--control-vector", str(vector), "--control-vector-layer-range", "1", "2") not in (plain, steered)
    narrow = tmp_path / "narrow.gguf"
    gguf_writer = gguf.GGUFWriter(str(narrow), arch="controlvector")
    gguf_writer.add_tensor("direction.1", np.ones(7, dtype=np.float32))
    gguf_writer.write_header_to_file()
    gguf_writer.write_kv_data_to_file()
    gguf_writer.write_tensors_to_file()
    gguf_writer.close()
    refused = launch(tmp_path, ["-np", "1", "-c", "1024", "--control-vector", str(narrow)])
    assert refused.process.wait(120) == 4
    assert "its vectors have 7 values" in refused.log()
