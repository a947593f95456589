"""A causal reranker (a decoder declaring rank pooling, with a rerank template, as Qwen3's
rerankers are): llama.cpp pools its last token, and the prompt is the model's template. Shown on
the embedded SmolLM2 with that metadata added: a document's score is what the embedding route
gives its rendered template, and documents score differently (the first token of a causal model
could not tell them apart).

SmolLM2 has no classification head, so its pooled row is the whole hidden state, while llama.cpp
reads one score per sequence as if rows were one wide: with several documents in one decode only
the first would be right. A real causal reranker (Qwen3) has the head; here each request ranks one
document."""

from __future__ import annotations

from pathlib import Path

import gguf
import requests

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import start
from tests.models import with_metadata

TEMPLATE = "Query: {query}\nDocument: {document}\nIs the document relevant?"
QUERY = "capital of France"


def test_a_causal_reranker_scores_its_template_by_the_last_token(server_dir: Path, tmp_path: Path) -> None:
    model = with_metadata(embedded_model_path(), tmp_path / "causal-reranker.gguf", {
        "llama.pooling_type": (gguf.GGUFValueType.UINT32, int(gguf.PoolingType.RANK)),
        "tokenizer.chat_template.rerank": (gguf.GGUFValueType.STRING, TEMPLATE)})
    server = start(server_dir, ["-m", str(model), "--reranking", "-np", "1", "-c", "512"])
    try:
        scores = []
        for document in ("Paris is the capital of France.", "Bananas are yellow.", "The sky is blue."):
            reply = requests.post(server.url("/v1/rerank"), json={"query": QUERY, "documents": [document]},
                                  timeout=60)
            assert reply.status_code == 200, reply.text
            score = reply.json()["results"][0]["relevance_score"]
            rendered = TEMPLATE.replace("{query}", QUERY).replace("{document}", document)
            embedded = requests.post(server.url("/embedding"), json={"content": rendered, "embd_normalize": -1},
                                     timeout=60).json()
            assert abs(embedded[0]["embedding"][0][0] - score) < 1e-4 * max(1.0, abs(score))
            scores.append(score)
        assert len(set(scores)) == 3
    finally:
        assert server.stop() == 0, server.log()
