"""POST /embedding, /embeddings (native) and /v1/embeddings (OpenAI), and the rerank endpoints.

Embeddings come from a second llama context on the loaded model (embeddings on, pooling from
``--pooling`` or the model), so generation and embeddings are served by one process at once.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api import ApiReply, ApiRequest
from app.context import ServerContext
from app.engine import EmbeddingResult
from app.errors import InvalidRequestError
from app.handlers.generation import wait_for
from app.handlers.params import validate_body
from app.handlers.prompts import tokenize_prompt


def normalize(vector: list[float], norm: int) -> list[float]:
    """llama-server's ``embd_normalize``: -1 none, 0 max-abs to int16 range, 1 taxicab, 2 euclidean,
    p > 2 the p-norm."""
    if norm < 0:
        return vector
    if norm == 0:
        scale = max((abs(v) for v in vector), default=0.0) / 32760.0
    elif norm == 2:
        scale = math.sqrt(sum(v * v for v in vector))
    else:
        scale = sum(abs(v) ** norm for v in vector) ** (1.0 / norm)
    return [v / scale for v in vector] if scale > 0 else vector


def embed(ctx: ServerContext, inputs: Sequence[Sequence[int]], should_stop: Callable[[], bool]) -> EmbeddingResult:
    return wait_for(ctx.engine.submit_embeddings(inputs).outcome, should_stop)


def _input_tokens(ctx: ServerContext, raw: Any, field: str) -> list[list[int]]:
    """A string, a list of strings, token ids, or a list of token lists."""
    vocab = ctx.engine.vocab
    if isinstance(raw, str):
        items: list[Any] = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(x, int) and not isinstance(x, bool) for x in raw):
        items = [raw]
    elif isinstance(raw, list):
        items = raw
    else:
        raise InvalidRequestError(f"Field '{field}': must be a string, a list of strings or token ids")
    if not items:
        raise InvalidRequestError(f"Field '{field}': Input content cannot be empty")
    tokens = []
    for number, item in enumerate(items):
        if isinstance(item, str):
            ids = vocab.tokenize(item, True, True)
        elif isinstance(item, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in item):
            ids = tokenize_prompt(vocab, item, False)
        else:
            raise InvalidRequestError(f"Field '{field}.{number}': must be a string or a list of token ids")
        if not ids:
            raise InvalidRequestError(f"Field '{field}.{number}': Input content cannot be empty")
        tokens.append(ids)
    return tokens


class NativeEmbeddingBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: Any = None
    input: Any = None
    embd_normalize: int | None = None  # default: --embd-normalize


def post_embedding(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(NativeEmbeddingBody, request.json_object())
    raw = body.input if body.input is not None else body.content
    if raw is None:
        raise InvalidRequestError('"input" or "content" must be provided')
    result = embed(ctx, _input_tokens(ctx, raw, "input" if body.input is not None else "content"),
                   request.should_stop)
    norm = ctx.settings.embd_normalize if body.embd_normalize is None else body.embd_normalize
    return ApiReply(body=[
        {"index": index, "embedding": [normalize(row, norm) for row in vectors]}
        for index, vectors in enumerate(result.vectors)
    ])


class OpenAIEmbeddingBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    input: Any
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def post_openai_embeddings(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(OpenAIEmbeddingBody, request.json_object())
    n_embd = ctx.engine.info.n_embd
    if body.dimensions is not None and body.dimensions != n_embd:
        raise InvalidRequestError(f"Field 'dimensions': this model's embeddings have {n_embd} dimensions; "
                                  "other sizes are not supported")
    result = embed(ctx, _input_tokens(ctx, body.input, "input"), request.should_stop)
    if result.pooling == "none":
        raise InvalidRequestError("Pooling type 'none' is not OAI compatible. Please use a different pooling type")
    total = sum(result.n_tokens)
    return ApiReply(body={
        "object": "list",
        "data": [{"object": "embedding", "index": index,
                  "embedding": _encode(normalize(vectors[0], 2), body.encoding_format)}
                 for index, vectors in enumerate(result.vectors)],
        "model": ctx.model_name,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    })


class RerankBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    query: Any = None
    documents: Any = None
    top_n: int | None = Field(None, ge=1)
    return_text: bool = False


def _rerank_inputs(ctx: ServerContext, query: str, documents: list[str]) -> list[list[int]]:
    """llama-server's layout: [BOS] query [EOS] [SEP] document [EOS], for the tokens the model has."""
    vocab = ctx.engine.vocab
    special = vocab.special_tokens()
    head = [special["bos"]] if "bos" in special else []
    head += vocab.tokenize(query, False, False)
    head += [special[name] for name in ("eos", "sep") if name in special]
    tail = [special["eos"]] if "eos" in special else []
    return [[*head, *vocab.tokenize(document, False, False), *tail] for document in documents]


def post_rerank(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(RerankBody, request.json_object())
    if body.query is None:
        raise InvalidRequestError('"query" must be provided')
    if not isinstance(body.query, str):
        raise InvalidRequestError('"query" must be a string')
    documents = body.documents
    if not isinstance(documents, list) or not documents or not all(isinstance(d, str) for d in documents):
        raise InvalidRequestError('"documents" must be a non-empty string array')
    inputs = _rerank_inputs(ctx, body.query, documents)
    result = embed(ctx, inputs, request.should_stop)
    scored = sorted(((vectors[0][0], index) for index, vectors in enumerate(result.vectors)),
                    key=lambda pair: (-pair[0], pair[1]))
    if body.top_n is not None:
        scored = scored[: body.top_n]
    results = []
    for score, index in scored:
        item: dict[str, Any] = {"index": index, "relevance_score": score}
        if body.return_text:
            item["document"] = {"text": documents[index]}
        results.append(item)
    total = sum(result.n_tokens)
    return ApiReply(body={"model": ctx.model_name, "object": "list", "results": results,
                          "usage": {"prompt_tokens": total, "total_tokens": total}})
