"""Media in requests: where an image or audio item's bytes come from (data: URIs, base64, http(s)
with --media-urls, file:// under --media-path), and prompts with media made into tokens and media
chunks. Every failure is a 400 naming the request field that holds the item."""

from __future__ import annotations

import base64
import binascii
import functools
import os
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.engine.errors import MediaError
from app.engine.types import MediaChunk
from app.handlers.context import ServerContext
from app.handlers.media_limits import DecodedLimits, check_decoded_size
from app.handlers.request_limits import check_media_count
from app.handlers.url_fetch import FetchPolicy, FetchRefused, fetch
from app.protocol.errors import InvalidRequestError

FETCH_TIMEOUT_SECONDS = 10.0
SOURCE_FIELD = "source_field"  # set by a dialect that converts its media parts into chat parts


@dataclass(frozen=True)
class MediaItem:
    """One image or audio file of a prompt, and the request field it came from. Its bytes are read
    when first asked for: an http(s) item is fetched only when the prompt is tokenized with a
    projector (never for /apply-template, never for a model that takes no media)."""

    field: str
    load: Callable[[], bytes]

    @classmethod
    def of(cls, data: bytes, field: str) -> MediaItem:
        return cls(field, lambda: data)

    @functools.cached_property
    def data(self) -> bytes:
        return self.load()


def _refuse(field: str, message: str) -> InvalidRequestError:
    return InvalidRequestError(f"Field '{field}': {message}")


def decode_base64(ctx: ServerContext, value: str, field: str) -> bytes:
    if len(value) * 3 // 4 > ctx.settings.media_max_bytes:
        raise _refuse(field, f"the media item is larger than --media-max-bytes ({ctx.settings.media_max_bytes})")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _refuse(field, "the media data is not valid base64") from None


def media_from_url(ctx: ServerContext, url: str, field: str) -> MediaItem:
    """An item given by URL: ``data:`` (base64), ``http(s)`` (only with --media-urls), ``file://``
    (only under --media-path)."""
    if url.startswith("data:"):
        head, sep, payload = url.partition(",")
        if not sep or not head.endswith(";base64"):
            raise _refuse(field, "a data: URI must be base64 (data:<type>;base64,<data>)")
        return MediaItem.of(decode_base64(ctx, payload, field), field)
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        if not ctx.settings.media_urls:
            raise _refuse(field, "fetching http(s) media URLs is off: send the item as a data: URI (base64), or "
                                 "start the server with --media-urls")
        return MediaItem(field, lambda: _fetch(ctx, url, field))  # fetched when its tokens are needed
    if url.startswith("file://"):
        return MediaItem.of(_read_file(ctx, urllib.parse.unquote(url[len("file://"):]), field), field)
    if scheme:
        raise _refuse(field, "the media URL must be a data: URI, raw base64, an http(s) URL (with --media-urls) or "
                             "a file:// URL (under --media-path)")
    return MediaItem.of(decode_base64(ctx, url, field), field)  # llama-server takes raw base64 too


def _fetch(ctx: ServerContext, url: str, field: str) -> bytes:
    policy = FetchPolicy(max_bytes=ctx.settings.media_max_bytes, timeout_seconds=FETCH_TIMEOUT_SECONDS,
                         allow_private=ctx.settings.media_urls_private)
    try:
        return fetch(url, policy)
    except FetchRefused as exc:
        raise _refuse(field, str(exc)) from None


def _read_file(ctx: ServerContext, path: str, field: str) -> bytes:
    root = ctx.settings.media_path
    if root is None:
        raise _refuse(field, "file:// media is off: start the server with --media-path DIR to allow files under DIR")
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, path))  # relative to --media-path, as llama-server; or absolute
    if os.path.commonpath([real_root, real]) != real_root:
        raise _refuse(field, f"the file is outside --media-path ({root})")
    try:
        if os.path.getsize(real) > ctx.settings.media_max_bytes:
            raise _refuse(field, f"the file is larger than --media-max-bytes ({ctx.settings.media_max_bytes})")
        with open(real, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise _refuse(field, f"the file could not be read ({exc.strerror})") from None


def tokenize_with_media(ctx: ServerContext, text: str, media: Sequence[MediaItem], add_special: bool = True,
                        parse_special: bool = True) -> tuple[list[int], tuple[MediaChunk, ...]]:
    """The prompt's tokens (media rows as placeholders) and media chunks; text alone without media."""
    if not media:
        return ctx.engine.vocab.tokenize(text, add_special, parse_special), ()
    projector = ctx.engine.media
    if projector is None:
        raise _refuse(media[0].field, "this model has no multimodal projector: start the server with --mmproj")
    limits = DecodedLimits(ctx.settings.media_max_pixels, ctx.settings.media_max_seconds)
    for item in media:
        check_decoded_size(item.data, item.field, limits)
    try:
        tokens, chunks = projector.tokenize(text, [item.data for item in media], add_special, parse_special)
    except MediaError as exc:
        field = media[exc.item].field if 0 <= exc.item < len(media) else media[0].field
        raise _refuse(field, str(exc)) from None
    return tokens, tuple(chunks)


def prompt_object(ctx: ServerContext, prompt: dict[str, Any], field: str, add_special: bool
                  ) -> tuple[list[int], tuple[MediaChunk, ...]]:
    """llama-server's prompt object: ``prompt_string`` with one media marker per item of
    ``multimodal_data`` (base64 image or audio files)."""
    text = prompt.get("prompt_string")
    if not isinstance(text, str):
        raise _refuse(f"{field}.prompt_string", "must be a string")
    data = prompt.get("multimodal_data", [])
    if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
        raise _refuse(f"{field}.multimodal_data", "must be an array of base64 strings")
    check_media_count(len(data), f"{field}.multimodal_data")
    items = [MediaItem.of(decode_base64(ctx, item, f"{field}.multimodal_data.{n}"), f"{field}.multimodal_data.{n}")
             for n, item in enumerate(data)]
    if items and ctx.engine.media is None:
        raise _refuse(f"{field}.multimodal_data", "this model has no multimodal projector: start the server with "
                                                  "--mmproj")
    return tokenize_with_media(ctx, text, items, add_special, True)


def media_marker(ctx: ServerContext) -> str:
    """The text that stands for one media item in a rendered prompt."""
    return ctx.engine.facts.media_marker or "<__media__>"
