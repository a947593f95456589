"""POST /slots/{id}?action=save|restore|erase, with --slot-save-path."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict

from app.handlers.context import ServerContext
from app.protocol.api import ApiReply, ApiRequest
from app.protocol.errors import InvalidRequestError

ACTIONS = ("save", "restore", "erase")


class SlotFileBody(BaseModel):
    """The body of save and restore (erase takes none)."""

    model_config = ConfigDict(extra="allow")
    filename: str | None = None


def valid_filename(name: Any) -> bool:
    """A plain file name: no directories, no '..', not absolute, nothing unprintable."""
    if not isinstance(name, str) or not name or len(name) > 255:
        return False
    if name in (".", "..") or "/" in name or "\\" in name or "\0" in name or name.startswith("."):
        return False
    return name.isprintable()


def _slot_id(ctx: ServerContext, raw: str) -> int:
    try:
        slot = int(raw)
    except ValueError:
        raise InvalidRequestError("Invalid slot ID") from None
    if not 0 <= slot < ctx.engine.n_slots:
        raise InvalidRequestError(f"Invalid slot ID: {slot} (this server has slots 0..{ctx.engine.n_slots - 1})")
    return slot


def post_slot_action(ctx: ServerContext, request: ApiRequest) -> ApiReply:
    slot = _slot_id(ctx, request.path_params.get("id_slot", ""))
    action = request.params.get("action")
    if action not in ACTIONS:
        raise InvalidRequestError(f"Invalid action: {action!r} (use one of {', '.join(ACTIONS)})")
    if action == "erase":
        erased = ctx.engine.erase_slot(slot)
        return ApiReply(body={"id_slot": slot, "n_erased": erased.n_tokens})
    filename = request.json_object().get("filename")
    if not isinstance(filename, str) or not valid_filename(filename):
        raise InvalidRequestError("Invalid filename")
    directory = ctx.settings.slot_save_path
    assert directory is not None  # the route requires --slot-save-path (app/handlers/routes.py)
    path = os.path.join(directory, filename)
    if action == "save":
        saved = ctx.engine.save_slot(slot, path)
        return ApiReply(body={"id_slot": slot, "filename": filename, "n_saved": saved.n_tokens,
                              "n_written": saved.n_bytes, "timings": {"save_ms": saved.ms}})
    restored = ctx.engine.restore_slot(slot, path)
    return ApiReply(body={"id_slot": slot, "filename": filename, "n_restored": restored.n_tokens,
                          "n_read": restored.n_bytes, "timings": {"restore_ms": restored.ms}})
