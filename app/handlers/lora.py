"""GET and POST /lora-adapters: the global adapter scales new requests get."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, RootModel

from app.handlers.context import ServerContext
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import InvalidRequestError


class LoraScale(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: int
    scale: float = 1.0


class LoraScalesBody(RootModel[list[LoraScale]]):
    """The body of POST /lora-adapters (validated by ``scales_from``, which names the bad entry)."""


def get_lora_adapters(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    paths = [path for path, _ in ctx.settings.lora_adapters]
    scales = ctx.engine.lora_scales
    return ApiReply(body=[{"id": index, "path": path, "scale": scales[index], "task_name": "", "prompt_prefix": ""}
                          for index, path in enumerate(paths)])


def scales_from(entries: Any, n_adapters: int, field: str) -> tuple[float, ...]:
    """``[{"id": i, "scale": s}, ...]`` as one scale per adapter; adapters not listed get 0."""
    if not isinstance(entries, list):
        raise InvalidRequestError(f"Field '{field}': must be an array of {{\"id\": int, \"scale\": float}}")
    scales = [0.0] * n_adapters
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InvalidRequestError(f"Field '{field}.{number}': must be {{\"id\": int, \"scale\": float}}")
        adapter, scale = entry.get("id"), entry.get("scale", 1.0)
        if not isinstance(adapter, int) or isinstance(adapter, bool) or not 0 <= adapter < n_adapters:
            raise InvalidRequestError(
                f"Field '{field}.{number}.id': no LoRA adapter {adapter!r} "
                f"(this server has {n_adapters}{': ids 0..' + str(n_adapters - 1) if n_adapters else ''})"
            )
        if not isinstance(scale, int | float) or isinstance(scale, bool):
            raise InvalidRequestError(f"Field '{field}.{number}.scale': must be a number")
        scales[adapter] = float(scale)
    return tuple(scales)


def post_lora_adapters(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    body = request.json()
    if not isinstance(body, list):
        raise InvalidRequestError("Request body must be an array")
    ctx.engine.set_lora_scales(scales_from(body, len(ctx.settings.lora_adapters), "body"))
    return ApiReply(body={"success": True})
