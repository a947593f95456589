"""Request schemas of the generation endpoints, and their translation into engine requests.

Validation is stricter than llama-server's (which answers a wrong type with a 500 or silently uses
the default): a field of the wrong type or out of range is a 400 that names the field. A field that
is present but ``null`` counts as absent, as in llama-server. Unknown fields are accepted (and
logged at debug level), so a new client field does not break the server.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.context import ServerContext
from app.engine import RANDOM_SEED, GenerationRequest, SamplingParams
from app.engine.types import DEFAULT_DRY_BREAKERS, DEFAULT_SAMPLERS
from app.errors import InvalidRequestError, NotSupportedError
from app.handlers.json_schema import schema_grammar
from app.handlers.lora import scales_from

log = logging.getLogger(__name__)

Model = TypeVar("Model", bound=BaseModel)


def _describe(error: Any) -> str:
    location = ".".join(str(part) for part in error["loc"] if not str(part).startswith(("function-", "list[")))
    return f"Field '{location}': {error['msg']}" if location else str(error["msg"])


def validate_body(model: type[Model], body: dict[str, Any]) -> Model:
    """Parse ``body`` into ``model``; 400 naming every bad field."""
    cleaned = {key: value for key, value in body.items() if value is not None}
    try:
        parsed = model.model_validate(cleaned)
    except ValidationError as exc:
        messages = []
        for error in exc.errors():
            message = _describe(error)
            if message not in messages:
                messages.append(message)
        raise InvalidRequestError("; ".join(messages)) from None
    if parsed.model_extra:
        log.debug("ignored unknown fields: %s", sorted(parsed.model_extra))
    return parsed


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class GenerationFields(BaseModel):
    """Fields shared by /completion, /v1/completions and /v1/chat/completions."""

    model_config = ConfigDict(extra="allow")

    stream: bool = False
    stream_options: StreamOptions | None = None
    n_predict: int | None = Field(None, ge=-1)
    max_tokens: int | None = Field(None, ge=-1)
    max_completion_tokens: int | None = Field(None, ge=-1)
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    typical_p: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = Field(None, ge=-1)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = Field(None, ge=-1, le=0xFFFFFFFF)
    min_keep: int | None = Field(None, ge=0)
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    logit_bias: dict[str, float | bool] | list[list[Any]] | None = None
    cache_prompt: bool | None = None
    id_slot: int = Field(-1, ge=-1)
    return_tokens: bool = False
    n: int = Field(1, ge=1)
    n_cmpl: int | None = Field(None, ge=1)
    n_keep: int = Field(0, ge=-1)
    n_discard: int = Field(0, ge=0)
    n_indent: int = Field(0, ge=0)
    t_max_predict_ms: int = Field(-1, ge=-1)
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = Field(2, ge=0)
    dry_penalty_last_n: int = Field(-1, ge=-1)
    dry_sequence_breakers: list[str] = Field(default_factory=lambda: list(DEFAULT_DRY_BREAKERS), min_length=1)
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    samplers: list[str] | str | None = None
    n_probs: int | None = Field(None, ge=0)
    post_sampling_probs: bool = False
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    lora: list[Any] | None = None

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


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


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
    n_vocab = ctx.engine.info.n_vocab
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
        result.extend((token, value) for token in tokens if 0 <= token < n_vocab)
    return tuple(result)


SAMPLER_LETTERS = {"e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p",
                   "p": "top_p", "m": "min_p", "x": "xtc", "t": "temperature"}
SAMPLER_NAMES = {name: name for name in SAMPLER_LETTERS.values()} | {
    "typical_p": "typ_p", "typical": "typ_p", "temp": "temperature", "nucleus": "top_p",
}


def sampler_order(raw: list[str] | str | None) -> tuple[str, ...]:
    """llama-server's ``samplers``: a list of names, or a string of one letter per sampler."""
    if raw is None:
        return DEFAULT_SAMPLERS
    names = [SAMPLER_LETTERS.get(letter) for letter in raw] if isinstance(raw, str) else [
        SAMPLER_NAMES.get(name) for name in raw
    ]
    if any(name is None for name in names):
        known = ", ".join(sorted(SAMPLER_NAMES))
        raise InvalidRequestError(f"Field 'samplers': unknown sampler in {raw!r} (known: {known}, or letters "
                                  f"{''.join(SAMPLER_LETTERS)})")
    return tuple(name for name in names if name is not None)


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
    settings = ctx.settings
    seed = settings.seed if fields.seed is None else fields.seed
    probs = fields.n_probs if n_probs is None else n_probs
    return SamplingParams(
        temperature=max(0.0, settings.temp if fields.temperature is None else fields.temperature),
        top_k=max(0, settings.top_k if fields.top_k is None else fields.top_k),
        top_p=_clamp(settings.top_p if fields.top_p is None else fields.top_p, 0.0, 1.0),
        min_p=_clamp(settings.min_p if fields.min_p is None else fields.min_p, 0.0, 1.0),
        typical_p=1.0 if fields.typical_p is None else fields.typical_p,
        repeat_penalty=settings.repeat_penalty if fields.repeat_penalty is None else fields.repeat_penalty,
        presence_penalty=fields.presence_penalty or 0.0,
        frequency_penalty=fields.frequency_penalty or 0.0,
        repeat_last_n=settings.repeat_last_n if fields.repeat_last_n is None else fields.repeat_last_n,
        seed=RANDOM_SEED if seed < 0 else seed,
        logit_bias=_logit_bias(ctx, fields.logit_bias),
        ignore_eos=fields.ignore_eos,
        min_keep=fields.min_keep or 0,
        dynatemp_range=fields.dynatemp_range,
        dynatemp_exponent=fields.dynatemp_exponent,
        top_n_sigma=fields.top_n_sigma,
        xtc_probability=_clamp(fields.xtc_probability, 0.0, 1.0),
        xtc_threshold=_clamp(fields.xtc_threshold, 0.0, 1.0),
        dry_multiplier=fields.dry_multiplier,
        dry_base=fields.dry_base if fields.dry_base >= 1.0 else 1.75,
        dry_allowed_length=fields.dry_allowed_length,
        dry_penalty_last_n=fields.dry_penalty_last_n,
        dry_sequence_breakers=tuple(fields.dry_sequence_breakers),
        mirostat=int(_clamp(fields.mirostat, 0, 2)),
        mirostat_tau=fields.mirostat_tau,
        mirostat_eta=fields.mirostat_eta,
        samplers=sampler_order(fields.samplers),
        grammar=grammar,
        n_probs=probs or 0,
        post_sampling_probs=fields.post_sampling_probs,
    )


def completions_count(ctx: ServerContext, fields: GenerationFields) -> int:
    """``n`` (or llama-server's ``n_cmpl``): 1 up to the number of slots."""
    count = fields.n_cmpl if fields.n_cmpl is not None else fields.n
    slots = ctx.engine.n_slots
    if not 1 <= count <= slots:
        raise InvalidRequestError(f"Field 'n': must be between 1 and the number of slots ({slots}), got {count}")
    return count


def generation_request(
    ctx: ServerContext,
    fields: GenerationFields,
    prompt: list[int],
    grammar: str | None = None,
    n_probs: int | None = None,
) -> GenerationRequest:
    if ctx.settings.embeddings or ctx.settings.reranking:  # llama-server: both make an embedding-only server
        raise NotSupportedError("This server does not support completions. Start it without `--embeddings`")
    if grammar is None:
        grammar = grammar_for(ctx, fields.grammar, fields.json_schema, "json_schema")
    lora = None if fields.lora is None else scales_from(fields.lora, len(ctx.settings.lora_adapters), "lora")
    return GenerationRequest(
        prompt=tuple(prompt),
        sampling=sampling_params(ctx, fields, grammar, n_probs),
        n_predict=fields.requested_n_predict(),
        stop=fields.stop_strings(),
        cache_prompt=ctx.settings.cache_prompt if fields.cache_prompt is None else fields.cache_prompt,
        id_slot=fields.id_slot,
        n_keep=fields.n_keep,
        n_indent=fields.n_indent,
        t_max_predict_ms=fields.t_max_predict_ms,
        lora=lora,
    )
