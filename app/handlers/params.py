"""Request schemas of the generation endpoints, and their translation into engine requests.

Validation is stricter than llama-server's (which answers a wrong type with a 500 or silently uses
the default): a field of the wrong type or out of range is a 400 that names the field. A field that
is present but ``null`` counts as absent, as in llama-server. Unknown fields are accepted (and
logged at debug level), so a new client field does not break the server.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.engine import GenerationRequest, SamplingParams
from app.engine.json_schema import schema_grammar
from app.engine.types import MediaChunk, SpeculativeParams, banning_end_of_generation
from app.handlers.context import ServerContext
from app.handlers.lora import scales_from
from app.handlers.preserved_tokens import requested_tokens
from app.handlers.request_limits import check_costs, check_logit_bias
from app.handlers.sampling import SamplingOverrides, overridden, sampler_order, seed_of
from app.handlers.tools import ToolChoice, ToolSpec
from app.protocol.errors import InvalidRequestError

log = logging.getLogger(__name__)

Model = TypeVar("Model", bound=BaseModel)


def _path(body: Any, loc: tuple[int | str, ...]) -> str:
    """The error's location as the client wrote it: pydantic's labels for the branches of a union
    (``str``, ``list[...]``, a tag) are left out, keeping what exists in the body (and the name of
    a missing field)."""
    parts: list[str] = []
    node = body
    for number, part in enumerate(loc):
        if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parts.append(str(part))
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and (part in node or number == len(loc) - 1):
            parts.append(part)
            node = node.get(part)
    return ".".join(parts)


def _describe(body: Any, errors: list[Any]) -> str:
    """Every distinct problem, naming its field. Of the errors under one top-level field, only the
    deepest are kept: a union reports each branch it tried, and the deepest is the one that fits."""
    deepest: dict[Any, int] = {}
    for error in errors:
        top = error["loc"][0] if error["loc"] else None
        deepest[top] = max(deepest.get(top, 0), len(error["loc"]))
    messages: list[str] = []
    for error in errors:
        top = error["loc"][0] if error["loc"] else None
        if len(error["loc"]) < deepest[top]:
            continue
        location = _path(body, tuple(error["loc"]))
        message = f"Field '{location}': {error['msg']}" if location else str(error["msg"])
        if message not in messages:
            messages.append(message)
    return "; ".join(messages)


def validate_body(model: type[Model], body: dict[str, Any]) -> Model:
    """Parse ``body`` into ``model``; 400 naming every bad field."""
    cleaned = {key: value for key, value in body.items() if value is not None}
    try:
        parsed = model.model_validate(cleaned)
    except ValidationError as exc:
        raise InvalidRequestError(_describe(cleaned, exc.errors())) from None
    if parsed.model_extra:
        log.debug("ignored unknown fields: %s", sorted(parsed.model_extra))
    return parsed


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class GenerationFields(SamplingOverrides):
    """Fields shared by /completion, /v1/completions and /v1/chat/completions: every sampling field
    of SamplingParams as an optional override (app/handlers/sampling.py), and these."""

    model_config = ConfigDict(extra="allow")

    stream: bool = False
    stream_options: StreamOptions | None = None
    n_predict: int | None = Field(None, ge=-1)
    max_tokens: int | None = Field(None, ge=-1)
    max_completion_tokens: int | None = Field(None, ge=-1)
    seed: int | None = Field(None, ge=-1, le=0xFFFFFFFF)
    stop: str | list[str] | None = None
    logit_bias: dict[str, float | bool] | list[list[Any]] | None = None
    cache_prompt: bool | None = None
    id_slot: int = Field(-1, ge=-1)
    return_tokens: bool = False
    n: int = Field(1, ge=1)
    n_cmpl: int | None = Field(None, ge=1)
    n_keep: int | None = Field(None, ge=-1)  # default: --keep
    n_discard: int = Field(0, ge=0)
    n_indent: int = Field(0, ge=0)
    t_max_predict_ms: int = Field(-1, ge=-1)
    dry_sequence_breakers: list[str] | None = Field(None, min_length=1)
    samplers: list[str] | str | None = None
    n_probs: int | None = Field(None, ge=0)
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    lora: list[Any] | None = None
    n_cache_reuse: int | None = Field(None, ge=0)  # default: --cache-reuse
    timings_per_token: bool = False
    return_progress: bool = False  # streaming only, as llama-server
    verbose: bool | None = None  # OpenAI answers carry "__verbose" (the native answer); default: -v
    sse_ping_interval: int | None = Field(None, ge=-1)  # seconds; -1: no pings; default --sse-ping-interval
    preserved_tokens: list[str] | None = None  # special tokens the text keeps (each one token), as llama-server
    # speculative decoding (app/engine/speculative.py); default: --spec-draft-n-max / -n-min / -p-min
    speculative_n_max: int | None = Field(None, ge=0, alias="speculative.n_max")
    speculative_n_min: int | None = Field(None, ge=0, alias="speculative.n_min")
    speculative_p_min: float | None = Field(None, ge=0.0, le=1.0, alias="speculative.p_min")

    def requested_n_predict(self) -> int:
        for value in (self.n_predict, self.max_completion_tokens, self.max_tokens):
            if value is not None:
                return value
        return -1

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        return tuple(stop for stop in stops if stop)

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def _logit_bias(ctx: ServerContext, raw: dict[str, float | bool] | list[list[Any]] | None
                ) -> tuple[tuple[int, float], ...]:
    if not raw:
        return ()
    pairs: list[tuple[Any, Any]]
    if isinstance(raw, dict):
        pairs = list(raw.items())
    else:
        pairs = []
        for entry in raw:
            if len(entry) != 2:
                raise InvalidRequestError("Field 'logit_bias': each entry must be [token or string, bias]")
            pairs.append((entry[0], entry[1]))
    check_logit_bias(len(pairs))  # before any string key is tokenized
    info = ctx.engine.info
    result: list[tuple[int, float]] = []
    for key, bias in pairs:
        if bias is False:
            value = float("-inf")
        elif isinstance(bias, int | float) and not isinstance(bias, bool):
            value = float(bias)
        else:
            raise InvalidRequestError(f"Field 'logit_bias': the bias of {key!r} must be a number or false")
        tokens: list[int]
        if isinstance(key, int) and not isinstance(key, bool):
            tokens = [key]
        elif isinstance(key, str) and key.lstrip("-").isdigit():
            tokens = [int(key)]
        elif isinstance(key, str):
            tokens = ctx.engine.vocab.tokenize(key, False, False)
        else:
            raise InvalidRequestError("Field 'logit_bias': keys must be token ids or strings")
        unknown = set(info.outside_vocabulary(tokens))  # ignored, as llama-server ignores them
        result.extend((token, value) for token in tokens if token not in unknown)
        check_logit_bias(len(result))
    return tuple(result)


def grammar_for(ctx: ServerContext, grammar: str | None, schema: Any, field: str) -> str:
    """GBNF from ``grammar`` or from a JSON schema; 400 saying why a schema cannot be used."""
    if grammar and schema is not None:
        raise InvalidRequestError(f"Field '{field}': give either a grammar or a JSON schema, not both")
    if grammar:
        return grammar
    if schema is None:
        return ""
    if not isinstance(schema, dict | bool):
        raise InvalidRequestError(f"Field '{field}': a JSON schema must be an object, got {type(schema).__name__}")
    try:
        return schema_grammar(ctx.engine.vocab, schema)
    except ValueError as exc:
        raise InvalidRequestError(f"Field '{field}': invalid JSON schema: {exc}") from None


def sampling_params(
    ctx: ServerContext, fields: GenerationFields, grammar: str = "", n_probs: int | None = None
) -> SamplingParams:
    defaults = ctx.sampling_defaults
    probs = fields.n_probs if n_probs is None else n_probs
    sampling = replace(
        overridden(defaults, fields),
        seed=seed_of(fields.seed, defaults.seed),
        logit_bias=defaults.logit_bias if fields.logit_bias is None else _logit_bias(ctx, fields.logit_bias),
        samplers=defaults.samplers if fields.samplers is None else sampler_order(fields.samplers),
        dry_sequence_breakers=(defaults.dry_sequence_breakers if fields.dry_sequence_breakers is None
                               else tuple(fields.dry_sequence_breakers)),
        grammar=grammar or defaults.grammar,  # as llama-server: an empty grammar keeps the server's
        n_probs=probs or 0,
    )
    # ignore_eos's bans as a request's own biases, so that generation_settings shows them as llama-server does
    return banning_end_of_generation(sampling, ctx.engine.vocab.eog_tokens())


def completions_count(fields: GenerationFields) -> int:
    """``n`` (or llama-server's ``n_cmpl``); at least 1 by the schema, at most the number of slots
    by the engine (a capacity rule, ``Engine.submit``)."""
    return fields.n_cmpl if fields.n_cmpl is not None else fields.n


def generation_request(
    ctx: ServerContext,
    fields: GenerationFields,
    prompt: list[int],
    grammar: str | None = None,
    n_probs: int | None = None,
    media: tuple[MediaChunk, ...] = (),
    preserved: frozenset[int] = frozenset(),
) -> GenerationRequest:
    """The engine's request from a body's generation fields; ``preserved``: special tokens the text keeps
    besides the body's own ``preserved_tokens`` (a chat's template's)."""
    if grammar is None:
        grammar = grammar_for(ctx, fields.grammar, fields.json_schema, "json_schema")
    lora = None if fields.lora is None else scales_from(fields.lora, len(ctx.settings.lora_adapters), "lora")
    stop = fields.stop_strings() or ctx.settings.reverse_prompt  # --reverse-prompt: llama-server's default
    sampling = sampling_params(ctx, fields, grammar, n_probs)
    check_costs(sampling.n_probs, stop)
    return GenerationRequest(
        prompt=tuple(prompt),
        sampling=sampling,
        n_predict=fields.requested_n_predict(),
        stop=stop,
        cache_prompt=ctx.settings.cache_prompt if fields.cache_prompt is None else fields.cache_prompt,
        id_slot=fields.id_slot,
        n_keep=ctx.settings.keep if fields.n_keep is None else fields.n_keep,
        n_discard=fields.n_discard,
        n_indent=fields.n_indent,
        t_max_predict_ms=fields.t_max_predict_ms,
        lora=lora,
        media=media,
        n_cache_reuse=ctx.settings.cache_reuse if fields.n_cache_reuse is None else fields.n_cache_reuse,
        timings_per_token=fields.timings_per_token,
        stream=fields.stream,
        return_progress=fields.return_progress and fields.stream,
        speculative=SpeculativeParams(fields.speculative_n_max, fields.speculative_n_min, fields.speculative_p_min),
        preserved_tokens=preserved | requested_tokens(ctx.engine.vocab, fields.preserved_tokens or ()),
    )


# ---- the chat body: /v1/chat/completions, and what /v1/responses, /v1/messages and transcriptions become

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str | None = None
    schema_: Any = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    schema_: Any = Field(None, alias="schema")
    json_schema: JsonSchemaFormat | None = None


class ChatBody(GenerationFields):
    messages: list[ChatMessage]  # empty is answered (an assistant turn from nothing), as llama-server answers it
    add_generation_prompt: bool = True
    continue_final_message: bool | str | None = None  # true, "content" or "reasoning_content": continue it
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = False
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    reasoning_format: str | None = None
    reasoning_budget_tokens: int | None = Field(None, ge=-1)  # -1: --reasoning-budget
    thinking_budget_tokens: int | None = Field(None, ge=-1)  # the same, another name
    reasoning_budget_message: str | None = None  # default: --reasoning-budget-message
    reasoning_control: bool = False  # POST /v1/chat/completions/control may end the thinking
    reasoning_effort: str | None = None  # a template argument; "none" turns thinking off
