"""GET /health, /props (and POST), /models, /slots and /metrics."""

from __future__ import annotations

import time
from typing import Any

from app.engine import GenerationRequest, SlotView
from app.handlers.context import ServerContext, agent_props
from app.handlers.shapes import generation_settings, slot_metrics
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import UnavailableError
from app.protocol.metrics import CONTENT_TYPE


def get_health(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    return ApiReply(body={"status": "ok"})


def get_live(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    """Liveness: 200 while the process and its engine thread work (loading and sleeping too); 503 once the
    engine thread has ended or one step has run over --liveness-seconds (a liveness probe restarts it)."""
    problem = ctx.engine.stalled(ctx.settings.liveness_seconds)
    if problem is not None:
        raise UnavailableError(problem)
    return ApiReply(body={"status": "ok"})


def _default_request(ctx: ServerContext) -> GenerationRequest:
    """What a request that sets nothing runs with."""
    return GenerationRequest(prompt=(), sampling=ctx.sampling_defaults)


def capabilities(ctx: ServerContext) -> list[str]:
    """What the served model takes, in llama-server's /v1/models words."""
    facts = ctx.engine.facts
    return ["completion", *(["multimodal"] if facts.vision or facts.audio else [])]


def get_props(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    info = ctx.engine.info
    facts = ctx.engine.facts
    settings = ctx.settings
    template = ctx.chat_template
    return ApiReply(body={
        "default_generation_settings": {
            "params": generation_settings(_default_request(ctx), False),
            "n_ctx": ctx.engine.n_ctx_slot,
        },
        "total_slots": ctx.engine.n_slots,
        "model_alias": ctx.model_name,
        "model_path": ctx.model_path,
        "model_ftype": info.ftype,
        "modalities": {"vision": facts.vision, "video": facts.video, "audio": facts.audio},
        "media_marker": facts.media_marker,
        "endpoint_slots": settings.slots,
        "endpoint_props": settings.props,
        "endpoint_metrics": settings.metrics,
        "ui": settings.ui_directory is not None,
        "ui_settings": settings.ui_settings,
        "chat_template": template.published,
        "chat_template_caps": ctx.chat_template_caps,
        "bos_token": info.bos_token,
        "eos_token": info.eos_token,
        "build_info": info.build_info,
        "is_sleeping": ctx.engine.is_sleeping,
        **agent_props(ctx.agent),
    })


def post_props(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    request.json()  # the body must still be valid JSON
    return ApiReply(body={"success": True})


def get_models(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    info = ctx.engine.info
    name = ctx.model_name
    aliases = ctx.model_aliases
    return ApiReply(body={
        "models": [{
            "name": name,
            "model": name,
            "modified_at": "",
            "size": "",
            "digest": "",
            "type": "model",
            "description": "",
            "tags": [""],
            "capabilities": capabilities(ctx),
            "parameters": "",
            "details": {
                "parent_model": "",
                "format": "gguf",
                "family": "",
                "families": [""],
                "parameter_size": "",
                "quantization_level": "",
            },
        }],
        "object": "list",
        "data": [{
            "id": name,
            "aliases": aliases,
            "tags": list(ctx.settings.tags),
            "object": "model",
            "created": int(time.time()),
            "owned_by": "llamacpp",
            "meta": {
                "vocab_type": info.vocab_type,
                "n_vocab": info.n_vocab,
                "n_ctx": ctx.engine.n_ctx_slot,
                "n_ctx_train": info.n_ctx_train,
                "n_embd": info.n_embd,
                "n_params": info.n_params,
                "size": info.size,
                "ftype": info.ftype,
            },
        }],
    })


def _slot_body(view: SlotView, whole: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": view.id,
        "n_ctx": view.n_ctx,
        "speculative": view.speculative,
        "is_processing": view.is_processing,
    }
    if view.request is None:
        return body
    settings = generation_settings(view.request, False)
    body.update(
        id_task=view.id_task,
        n_prompt_tokens=view.n_cached,
        n_prompt_tokens_processed=view.n_prompt_processed,
        n_prompt_tokens_cache=view.n_prompt_cache,
        params=settings if whole else slot_metrics(settings),
        next_token=[{
            "has_next_token": view.has_next_token,
            "has_new_line": view.has_new_line,
            "n_remain": view.n_remain,
            "n_decoded": view.n_decoded,
        }],
    )
    return body


def get_slots(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    views = ctx.engine.slot_views()
    if "fail_on_no_slot" in request.params and all(view.is_processing for view in views):
        raise UnavailableError("no slot available")
    return ApiReply(body=[_slot_body(view, ctx.settings.slots_debug) for view in views])


def get_metrics(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    return ApiReply(
        text=ctx.metrics.render(),
        content_type=CONTENT_TYPE,
        headers={"Process-Start-Time-Unix": str(int(ctx.started_at))},
    )
