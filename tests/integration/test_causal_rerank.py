"""A causal reranker (a decoder declaring rank pooling, with a rerank template, as Qwen3's
rerankers are): llama.cpp pools its last token, and the prompt is the model's template. Shown on
the embedded SmolLM2 with that metadata added: each document gets the score that the embedding
route gives its rendered template, and documents score differently (the first token of a causal
model could not tell them apart)."""

from __future__ import annotations

from pathlib import Path

import gguf
import requests

from app.model_files import embedded_model_path
from tests.integration.conftest import start
from tests.models import with_metadata

TEMPLATE = "Query: {query}\nDocument: {document}\nIs the document relevant?"


def test_a_causal_reranker_scores_its_template_by_the_last_token(server_dir: Path, tmp_path: Path) -> None:
    model = with_metadata(embedded_model_path(), tmp_path / "causal-reranker.gguf", {
        "llama.pooling_type": (gguf.GGUFValueType.UINT32, int(gguf.PoolingType.RANK)),
        "tokenizer.chat_template.rerank": (gguf.GGUFValueType.STRING, TEMPLATE)})
    server = start(server_dir, ["-m", str(model), "--reranking", "-np", "1", "-c", "512"])
    try:
        documents = ["Paris is the capital of France.", "Bananas are yellow.", "The sky is blue."]
        reply = requests.post(server.url("/v1/rerank"), json={"query": "capital of France", "documents": documents},
                              timeout=60)
        assert reply.status_code == 200, reply.text
        scores = {item["index"]: item["relevance_score"] for item in reply.json()["results"]}
        assert len(set(scores.values())) == 3
        for index, document in enumerate(documents):
            rendered = TEMPLATE.replace("{query}", "capital of France").replace("{document}", document)
            embedded = requests.post(server.url("/embedding"), json={"content": rendered}, timeout=60).json()
            assert abs(embedded[0]["embedding"][0][0] - scores[index]) < 1e-4 * max(1.0, abs(scores[index]))
    finally:
        assert server.stop() == 0, server.log()
