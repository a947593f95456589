"""POST /infill: fill-in-the-middle with the model's FIM tokens, answered like /completion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from app.engine import Vocabulary
from app.handlers.completions import native_body, native_stream
from app.handlers.context import ServerContext
from app.handlers.generation import JobGroup, ping_interval, stream_reply
from app.handlers.params import GenerationFields, completions_count, generation_request, validate_body
from app.handlers.prompt_log import log_prompt
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import InvalidRequestError, NotSupportedError

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


@dataclass(frozen=True)
class InfillLayout:
    """What the FIM prompt's layout depends on besides the request."""

    n_batch: int  # prefix and suffix are cut to fit one batch, 3:1
    n_ctx: int  # the slot's context: repository context fills what the batch and the answer leave
    n_predict: int  # the server's -n
    spm: bool = False  # --spm-infill: suffix before prefix
    bos: int | None = None  # the BOS token, when the model adds one


def infill_prompt(vocab: Vocabulary, special: dict[str, int], body: InfillBody, extra: list[ExtraChunk],
                  layout: InfillLayout) -> list[int]:
    """llama-server's layout (its ``format_prompt_infill``): the repository context (FIM_REP and
    FIM_SEP with file names, or snippet separators), then ``<FIM_PRE>prefix prompt<FIM_SUF>suffix
    <FIM_MID>``, or with ``--spm-infill`` ``<FIM_SUF>suffix<FIM_PRE>prefix prompt<FIM_MID>``."""
    def tokens(text: str) -> list[int]:
        return vocab.tokenize(text, False, False)

    context: list[int] = []
    if "fim_rep" in special:
        context += [special["fim_rep"], *tokens("myproject\n")]
    for chunk in extra:
        if "fim_sep" in special:
            context += [special["fim_sep"], *tokens((chunk.filename or "tmp") + "\n")]
        else:
            context += tokens(SNIPPET_SEPARATOR)
        context += tokens(chunk.text)
    if "fim_sep" in special:
        context += [special["fim_sep"], *tokens("filename\n")]
    prefix, suffix, middle = tokens(body.input_prefix), tokens(body.input_suffix), tokens(body.prompt)
    take_prefix = min(len(prefix), 3 * (layout.n_batch // 4))
    take_suffix = min(len(suffix), max(0, layout.n_batch // 4 - (2 + len(middle))))
    take_context = min(max(0, layout.n_ctx - layout.n_batch - 2 * layout.n_predict), len(context))
    before = [special["fim_pre"], *prefix[len(prefix) - take_prefix:], *middle]
    after = [special["fim_suf"], *suffix[:take_suffix]]
    first, second = (after, before) if layout.spm else (before, after)
    bos = [layout.bos] if layout.bos is not None else []
    return [*context[len(context) - take_context:], *bos, *first, *second, special["fim_mid"]]


def post_infill(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    special = fim_tokens(ctx.engine.vocab)  # 501 first, as llama-server answers
    body = validate_body(InfillBody, request.json_object())
    extra = _extra(body.input_extra)
    info = ctx.engine.info
    layout = InfillLayout(n_batch=min(ctx.settings.batch_size, ctx.engine.n_ctx_slot), n_ctx=ctx.engine.n_ctx_slot,
                          n_predict=ctx.settings.n_predict, spm=ctx.settings.spm_infill,
                          bos=special.get("bos") if info.add_bos else None)
    prompt = infill_prompt(ctx.engine.vocab, special, body, extra, layout)
    job = generation_request(ctx, body, prompt)
    log_prompt(ctx.settings.log_prompts_dir, list(job.prompt))
    copies = completions_count(body)
    group = JobGroup(ctx.engine, [job], copies)
    if body.stream:
        return stream_reply(group, request.should_stop, lambda stream: native_stream(ctx, stream, [job], copies),
                            ping_seconds=ping_interval(ctx.settings.sse_ping_interval, body.sse_ping_interval))
    results = group.results(request.should_stop)
    finals = [native_body(ctx, job, result, index, False, body.return_tokens) for index, result in enumerate(results)]
    return ApiReply(body=finals[0] if len(finals) == 1 else finals)
