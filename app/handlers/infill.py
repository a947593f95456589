"""POST /infill: fill-in-the-middle with the model's FIM tokens, answered like /completion."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from app.api import ApiReply, ApiRequest
from app.context import ServerContext
from app.engine import Vocabulary
from app.errors import InvalidRequestError, NotSupportedError
from app.handlers.completions import native_body, native_stream
from app.handlers.generation import JobGroup, stream_reply
from app.handlers.params import GenerationFields, completions_count, generation_request, validate_body

SNIPPET_SEPARATOR = "\n\n--- snippet ---\n\n"


class ExtraChunk(BaseModel):
    model_config = ConfigDict(extra="allow")
    filename: str = ""
    text: str


class InfillBody(GenerationFields):
    input_prefix: str
    input_suffix: str
    input_extra: list[Any] = []
    prompt: str = ""


def _extra(raw: list[Any]) -> list[ExtraChunk]:
    chunks = []
    for number, item in enumerate(raw):
        if not isinstance(item, dict):
            raise InvalidRequestError('"input_extra" must be an array of {"filename": string, "text": string}')
        if not isinstance(item.get("text"), str):
            raise InvalidRequestError(f"Field 'input_extra.{number}': extra_context chunk must contain a \"text\" "
                                      "field with a string value")
        if "filename" in item and not isinstance(item["filename"], str):
            raise InvalidRequestError(f"Field 'input_extra.{number}': extra_context chunk's \"filename\" field "
                                      "must be a string")
        chunks.append(ExtraChunk.model_validate(item))
    return chunks


def fim_tokens(vocab: Vocabulary) -> dict[str, int]:
    special = vocab.special_tokens()
    missing = [name for name, key in (("prefix", "fim_pre"), ("suffix", "fim_suf"), ("middle", "fim_mid"))
               if key not in special]
    if missing:
        raise NotSupportedError("Infill is not supported by this model: " +
                                "".join(f"{name} token is missing. " for name in missing))
    return special


def infill_prompt(vocab: Vocabulary, special: dict[str, int], body: InfillBody, extra: list[ExtraChunk],
                  n_batch: int) -> list[int]:
    """llama-server's layout: repository-level context (or plain snippets) before
    ``<FIM_PRE>prefix<FIM_SUF>suffix<FIM_MID>prompt``; prefix and suffix trimmed to the batch 3:1."""
    tokens: list[int] = []
    if "fim_rep" in special and "fim_sep" in special:
        tokens += [special["fim_rep"], *vocab.tokenize("myproject\n", False, False)]
        for chunk in extra:
            tokens += [special["fim_sep"], *vocab.tokenize(f"{chunk.filename}\n{chunk.text}", False, False)]
        tokens += [special["fim_sep"], *vocab.tokenize("filename\n", False, False)]
    elif extra:
        snippets = SNIPPET_SEPARATOR.join(chunk.text for chunk in extra) + SNIPPET_SEPARATOR
        tokens += vocab.tokenize(snippets, False, False)
    prefix = vocab.tokenize(body.input_prefix, False, False)
    suffix = vocab.tokenize(body.input_suffix, False, False)
    middle = vocab.tokenize(body.prompt, False, False)
    take_prefix = min(len(prefix), 3 * (n_batch // 4))
    take_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(middle))))
    prefix = prefix[len(prefix) - take_prefix:]
    suffix = suffix[:take_suffix]
    return [*tokens, special["fim_pre"], *prefix, special["fim_suf"], *suffix, special["fim_mid"], *middle]


def post_infill(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    special = fim_tokens(ctx.engine.vocab)  # 501 first, as llama-server answers
    body = validate_body(InfillBody, request.json_object())
    extra = _extra(body.input_extra)
    prompt = infill_prompt(ctx.engine.vocab, special, body, extra,
                           min(ctx.settings.batch_size, ctx.engine.n_ctx_slot))
    job = generation_request(ctx, body, prompt)
    copies = completions_count(body)
    group = JobGroup(ctx.engine, [job], copies)
    if body.stream:
        return stream_reply(group, request.should_stop, lambda stream: native_stream(ctx, stream, [job], copies))
    results = group.results(request.should_stop)
    finals = [native_body(ctx, job, result, index, False, body.return_tokens) for index, result in enumerate(results)]
    return ApiReply(body=finals[0] if len(finals) == 1 else finals)
