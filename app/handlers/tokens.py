"""POST /tokenize and POST /detokenize."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from app.handlers.context import ServerContext
from app.handlers.params import validate_body
from app.handlers.prompts import tokenize_prompt
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import InvalidRequestError


class TokenizeBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str | list[int | str] | None = None
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    tokens: list[int] = []


def _piece_json(piece: bytes) -> str | list[int]:
    """A token's text, or its bytes as ints when they are not valid UTF-8 on their own."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


def post_tokenize(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(TokenizeBody, request.json_object())
    if body.content is None:
        return ApiReply(body={"tokens": []})
    vocab = ctx.engine.vocab
    tokens = tokenize_prompt(vocab, body.content, body.add_special, body.parse_special)
    if not body.with_pieces:
        return ApiReply(body={"tokens": tokens})
    pieces: list[dict[str, Any]] = [
        {"id": token, "piece": _piece_json(vocab.piece(token, True))} for token in tokens
    ]
    return ApiReply(body={"tokens": pieces})


def post_detokenize(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = validate_body(DetokenizeBody, request.json_object())
    bad = ctx.engine.info.outside_vocabulary(body.tokens)
    if bad:
        last = ctx.engine.info.n_vocab - 1
        raise InvalidRequestError(f"Field 'tokens': ids outside the vocabulary (0..{last}): {bad[:8]}")
    vocab = ctx.engine.vocab
    data = b"".join(vocab.piece(token, True) for token in body.tokens)
    return ApiReply(body={"content": data.decode("utf-8", errors="replace")})
