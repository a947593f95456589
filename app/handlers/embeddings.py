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

from app.engine import EmbeddingResult
from app.handlers.context import ServerContext
from app.handlers.generation import wait_for
from app.handlers.params import validate_body
from app.handlers.prompts import is_single_prompt, tokenize_prompt
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import InvalidRequestError


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


def _content_text(content: Any, field: str) -> str:
    """An OpenAI content entry's text (``{"content": "..."}`` or text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        texts = []
        for number, part in enumerate(content):
            if part.get("type", "text") != "text" or not isinstance(part.get("text"), str):
                raise InvalidRequestError(f"Field '{field}.{number}': only text parts are embedded here (no "
                                          "projector in the embedding context)")
            texts.append(part["text"])
        return "\n".join(texts)
    raise InvalidRequestError(f"Field '{field}': must be a string or an array of text parts")


def _input_tokens(ctx: ServerContext, raw: Any, field: str) -> list[list[int]]:
    """llama-server's input shapes: one prompt (a string, token ids, or ids mixed with strings), a
    list of them, or OpenAI content entries (``{"content": ...}``)."""
    vocab = ctx.engine.vocab
    if isinstance(raw, list) and not raw:
        raise InvalidRequestError(f"Field '{field}': must not be empty")
    single = is_single_prompt(raw) or (isinstance(raw, dict) and "content" in raw)
    if not single and not isinstance(raw, list):
        raise InvalidRequestError(f"Field '{field}': must be a string, token ids, or a list of them")
    items: list[Any] = [raw] if single else raw
    tokens = []
    for number, item in enumerate(items):
        where = field if single else f"{field}.{number}"
        if isinstance(item, dict) and "content" in item:
            ids = vocab.tokenize(_content_text(item["content"], f"{where}.content"), True, True)
        elif isinstance(item, str | list) and is_single_prompt(item):
            ids = tokenize_prompt(vocab, item, True)
        else:
            raise InvalidRequestError(f"Field '{where}': must be a string, token ids (with strings), or "
                                      '{"content": ...}')
        if not ids:
            raise InvalidRequestError(f"Field '{where}': Input content cannot be empty")
        tokens.append(ids)
    return tokens


def _native_answer(ctx: ServerContext, result: EmbeddingResult, requested_norm: int | None) -> ApiReply:
    """The native answer: every input's vectors, normalized as asked, else by --embd-normalize."""
    norm = ctx.settings.embd_normalize if requested_norm is None else requested_norm
    return ApiReply(body=[
        {"index": index, "embedding": [normalize(row, norm) for row in vectors]}
        for index, vectors in enumerate(result.vectors)
    ])


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
    return _native_answer(ctx, result, body.embd_normalize)


class OpenAIEmbeddingBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    input: Any = None
    content: Any = None  # llama-server: "content" instead of "input" gets the native answer
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    embd_normalize: int | None = None  # default 2 (Euclidean), as llama-server's


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
    if body.input is None and body.content is None:
        raise InvalidRequestError('"input" or "content" must be provided')
    if body.input is None:
        return _native_answer(ctx, embed(ctx, _input_tokens(ctx, body.content, "content"), request.should_stop),
                              body.embd_normalize)
    norm = 2 if body.embd_normalize is None else body.embd_normalize  # the OpenAI route's default: Euclidean
    result = embed(ctx, _input_tokens(ctx, body.input, "input"), request.should_stop)
    if result.pooling == "none":
        raise InvalidRequestError("Pooling type 'none' is not OAI compatible. Please use a different pooling type")
    total = sum(result.n_tokens)
    return ApiReply(body={
        "object": "list",
        "data": [{"object": "embedding", "index": index,
                  "embedding": _encode(normalize(vectors[0], norm), body.encoding_format)}
                 for index, vectors in enumerate(result.vectors)],
        "model": ctx.model_name,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    })


class RerankBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    query: Any = None
    documents: Any = None
    texts: Any = None  # the TEI form (Hugging Face text-embeddings-inference): answered as a bare list
    top_n: int | None = Field(None, ge=1)
    return_text: bool = False
    model: str | None = None


def rerank_inputs(ctx: ServerContext, query: str, documents: list[str]) -> list[list[int]]:
    """llama-server's ``format_prompt_rerank``: the model's rerank template (``{query}``,
    ``{document}``; causal rerankers bring one), else [BOS] query [EOS] [SEP] document [EOS], each
    special token where the tokenizer adds it."""
    vocab, info = ctx.engine.vocab, ctx.engine.info
    if info.rerank_template is not None:
        return [vocab.tokenize(info.rerank_template.replace("{query}", query).replace("{document}", document),
                               False, True) for document in documents]
    special = vocab.special_tokens()
    eos = special.get("eos", special.get("sep"))
    head = [special["bos"]] if info.add_bos and "bos" in special else []
    head += vocab.tokenize(query, False, False)
    head += [eos] if info.add_eos and eos is not None else []
    head += [special["sep"]] if info.add_sep and "sep" in special else []
    tail = [eos] if info.add_eos and eos is not None else []
    return [[*head, *vocab.tokenize(document, False, False), *tail] for document in documents]


def post_rerank(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(RerankBody, request.json_object())
    if body.query is None:
        raise InvalidRequestError('"query" must be provided')
    if not isinstance(body.query, str):
        raise InvalidRequestError('"query" must be a string')
    tei = body.texts is not None  # llama-server: "texts" makes it the TEI form
    documents = body.documents if body.documents is not None else body.texts
    if not isinstance(documents, list) or not documents or not all(isinstance(d, str) for d in documents):
        raise InvalidRequestError('"documents" must be a non-empty string array')
    result = embed(ctx, rerank_inputs(ctx, body.query, documents), request.should_stop)
    scored = sorted(((vectors[0][0], index) for index, vectors in enumerate(result.vectors)),
                    key=lambda pair: (-pair[0], pair[1]))
    if body.top_n is not None:
        scored = scored[: body.top_n]
    results = []
    for score, index in scored:
        item: dict[str, Any] = {"index": index, "score" if tei else "relevance_score": score}
        if body.return_text:
            item.update({"text": documents[index]} if tei else {"document": {"text": documents[index]}})
        results.append(item)
    if tei:
        return ApiReply(body=results)
    total = sum(result.n_tokens)
    return ApiReply(body={"model": body.model or ctx.model_name, "object": "list", "results": results,
                          "usage": {"prompt_tokens": total, "total_tokens": total}})
