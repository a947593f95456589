"""Response bodies in llama-server's shapes: native completion, OpenAI completion and chat."""

from __future__ import annotations

import secrets
import string
import time
from dataclasses import asdict
from typing import Any

from app.engine import Completion, FinishReason, GenerationRequest, Timings, TokenChunk, Vocabulary
from app.engine.types import TokenProbs
from app.handlers.context import ServerContext

_ALPHANUMERIC = string.ascii_letters + string.digits


def random_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ALPHANUMERIC) for _ in range(32))


def chunk_extras(event: TokenChunk) -> dict[str, Any]:
    """What a streamed chunk carries besides its text: ``timings`` (``timings_per_token``) and
    ``prompt_progress`` (``return_progress``), as llama-server adds them to every dialect's chunk."""
    extras: dict[str, Any] = {}
    if event.timings is not None:
        extras["timings"] = timings_body(event.timings)
    if event.progress is not None:
        extras["prompt_progress"] = asdict(event.progress)
    return extras


def timings_body(timings: Timings) -> dict[str, Any]:
    def per_token(ms: float, n: int) -> float:
        return ms / n if n else 0.0

    def per_second(ms: float, n: int) -> float:
        return 1000.0 * n / ms if ms else 0.0

    body: dict[str, Any] = {
        "cache_n": timings.cache_n,
        "prompt_n": timings.prompt_n,
        "prompt_ms": timings.prompt_ms,
        "prompt_per_token_ms": per_token(timings.prompt_ms, timings.prompt_n),
        "prompt_per_second": per_second(timings.prompt_ms, timings.prompt_n),
        "predicted_n": timings.predicted_n,
        "predicted_ms": timings.predicted_ms,
        # over the decode steps, as llama-server: the first token comes from the prompt's last batch
        "predicted_per_token_ms": per_token(timings.predicted_ms, max(0, timings.predicted_n - 1)),
        "predicted_per_second": per_second(timings.predicted_ms, max(0, timings.predicted_n - 1)),
    }
    if timings.draft_n > 0:  # as llama-server: only when the job speculated
        body.update(draft_n=timings.draft_n, draft_n_accepted=timings.draft_n_accepted)
    return body


def generation_settings(request: GenerationRequest, stream: bool) -> dict[str, Any]:
    """The parameters a job ran with (the subset of llama-server's ``generation_settings`` that
    this server honours)."""
    sampling: dict[str, Any] = {key: list(value) if isinstance(value, tuple) else value
                                for key, value in asdict(request.sampling).items()}
    sampling["logit_bias"] = [{"token": token, "bias": None if bias == float("-inf") else bias}
                              for token, bias in request.sampling.logit_bias]
    return {
        **sampling,
        "max_tokens": request.n_predict,
        "n_predict": request.n_predict,
        "stream": stream,
        "cache_prompt": request.cache_prompt,
        "id_slot": request.id_slot,
        "stop": list(request.stop),
        "n_keep": request.n_keep,
        "n_discard": request.n_discard,
        "n_indent": request.n_indent,
        "t_max_predict_ms": request.t_max_predict_ms,
        "preserved_tokens": sorted(request.preserved_tokens),
    }


# What llama-server's /slots shows of a slot's parameters by default (server-task.cpp, to_json with
# only_metrics): numbers that say how it samples, nothing of what its user sent (grammar, schema,
# stop strings, logit bias, DRY breakers). The whole set only with --slots-debug.
SLOT_METRICS_FIELDS = (
    "seed", "temperature", "dynatemp_range", "dynatemp_exponent", "top_k", "top_p", "min_p", "top_n_sigma",
    "xtc_probability", "xtc_threshold", "typical_p", "repeat_last_n", "repeat_penalty", "presence_penalty",
    "frequency_penalty", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "mirostat",
    "mirostat_tau", "mirostat_eta", "adaptive_target", "adaptive_decay",
    "max_tokens", "n_predict", "n_keep", "n_discard", "ignore_eos", "stream",
    "n_probs", "min_keep", "samplers", "timings_per_token", "post_sampling_probs", "backend_sampling", "lora",
)


def slot_metrics(settings: dict[str, Any]) -> dict[str, Any]:
    """Of a job's ``generation_settings``, what /slots shows by default."""
    return {key: settings[key] for key in SLOT_METRICS_FIELDS if key in settings}


def _token_entry(vocab: Vocabulary, token: int, value: float, post: bool) -> dict[str, Any]:
    piece = vocab.piece(token, False)
    return {
        "id": token,
        "token": piece.decode("utf-8", errors="ignore"),
        "bytes": list(piece),
        ("prob" if post else "logprob"): value,
    }


def probability_entries(vocab: Vocabulary, probs: tuple[TokenProbs, ...], post: bool) -> list[dict[str, Any]]:
    """llama-server's ``completion_probabilities`` entries (also OpenAI's ``logprobs.content``)."""
    entries = []
    for item in probs:
        entry = _token_entry(vocab, item.token, item.value, post)
        entry["top_probs" if post else "top_logprobs"] = [
            _token_entry(vocab, token, value, post) for token, value in item.top if not post or value > 0.0
        ]
        entries.append(entry)
    return entries


def probs_within_text(vocab: Vocabulary, result: Completion) -> tuple[TokenProbs, ...]:
    """The probabilities of the tokens that made the final text (a stop word's tokens dropped)."""
    if result.finish is not FinishReason.WORD:
        return result.probs
    limit = len(result.text.encode("utf-8"))
    kept: list[TokenProbs] = []
    size = 0
    for item in result.probs:
        if size >= limit:
            break
        kept.append(item)
        size += len(vocab.piece(item.token, False))
    return tuple(kept)


def legacy_logprobs(entries: list[dict[str, Any]], offset: int = 0) -> dict[str, Any]:
    """OpenAI's /v1/completions ``logprobs`` object, beside llama-server's ``content`` list."""
    offsets = []
    position = offset
    for entry in entries:
        offsets.append(position)
        position += len(entry["token"])
    return {
        "content": entries,
        "tokens": [entry["token"] for entry in entries],
        "token_logprobs": [entry.get("logprob", entry.get("prob")) for entry in entries],
        "top_logprobs": [
            {top["token"]: top.get("logprob", top.get("prob")) for top in entry.get("top_logprobs",
                                                                                   entry.get("top_probs", []))}
            for entry in entries
        ],
        "text_offset": offsets,
    }


def _prompt_text(ctx: ServerContext, request: GenerationRequest) -> str:
    """The prompt as text; each media chunk as the media marker."""
    vocab = ctx.engine.vocab
    starts = {chunk.start for chunk in request.media}
    marker = ctx.engine.facts.media_marker or ""
    return "".join(
        (marker if index in starts else "") if token < 0 else vocab.piece(token, True).decode("utf-8", "replace")
        for index, token in enumerate(request.prompt)
    )


def verbose_answer(ctx: ServerContext, fields: Any) -> bool:
    """Whether an OpenAI-shaped answer carries llama-server's ``__verbose`` debug field (the native
    answer): the request's ``verbose``, else the server's ``-v``."""
    requested = getattr(fields, "verbose", None)
    return bool(ctx.settings.verbose if requested is None else requested)


def native_final(
    ctx: ServerContext,
    request: GenerationRequest,
    result: Completion,
    index: int,
    stream: bool,
    return_tokens: bool,
) -> dict[str, Any]:
    """The final object of POST /completion (non-streaming, or the last event of a stream)."""
    prompt_text = _prompt_text(ctx, request)
    return {
        "index": index,
        "content": "" if stream else result.text,
        "tokens": list(result.tokens) if return_tokens and not stream else [],
        "id_slot": result.id_slot,
        "stop": True,
        "model": ctx.model_name,
        "tokens_predicted": result.timings.predicted_n,
        "tokens_evaluated": result.n_prompt,
        "generation_settings": generation_settings(request, stream),
        "prompt": prompt_text,
        "has_new_line": "\n" in result.text,
        "truncated": result.truncated,
        "deadline_exceeded": result.deadline_exceeded,
        "stop_type": result.finish.value,
        "stopping_word": result.stopping_word,
        "tokens_cached": result.n_cached_after,
        "timings": timings_body(result.timings),
    }


def finish_reason(result: Completion) -> str:
    return "length" if result.finish is FinishReason.LIMIT else "stop"


def usage_body(results: list[Completion], copies: int = 1) -> dict[str, Any]:
    """Token counts; a prompt shared by ``copies`` completions (n > 1) counts once."""
    firsts = results[::copies]
    prompt = sum(result.n_prompt for result in firsts)
    completion = sum(result.timings.predicted_n for result in results)
    cached = sum(result.timings.cache_n for result in firsts)
    return {
        "completion_tokens": completion,
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def openai_envelope(ctx: ServerContext, object_name: str, response_id: str) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": object_name,
        "created": int(time.time()),
        "model": ctx.model_name,
        "system_fingerprint": ctx.engine.info.build_info,
    }


def merged_timings(results: list[Completion]) -> dict[str, Any]:
    first = results[0].timings
    if len(results) == 1:
        return timings_body(first)
    return timings_body(Timings(
        cache_n=sum(r.timings.cache_n for r in results),
        prompt_n=sum(r.timings.prompt_n for r in results),
        prompt_ms=max(r.timings.prompt_ms for r in results),
        predicted_n=sum(r.timings.predicted_n for r in results),
        predicted_ms=max(r.timings.predicted_ms for r in results),
        draft_n=sum(r.timings.draft_n for r in results),
        draft_n_accepted=sum(r.timings.draft_n_accepted for r in results),
    ))
