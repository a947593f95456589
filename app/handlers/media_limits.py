"""What a media item becomes once decoded, read from its header before anything decodes it: an image's
pixels (a 60 KB PNG can declare 50,000 x 50,000 of them) and an audio (or MP4 video) file's duration. Items over
``--media-max-pixels`` or ``--media-max-seconds`` are refused with a 400 naming the field; the projector
(libmtmd) then decodes only what is within them. Pillow reads image headers, mutagen audio headers."""

from __future__ import annotations

import io
from dataclasses import dataclass

from app.protocol.errors import InvalidRequestError


@dataclass(frozen=True)
class DecodedLimits:
    max_pixels: int  # 0: no limit
    max_seconds: float  # 0: no limit


def image_pixels(data: bytes) -> int | None:
    """The pixels an image declares (width x height, from its header alone); None for data that is not
    an image Pillow knows."""
    from PIL import Image, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = None  # Pillow only reads headers here (it decodes nothing): the limit is ours
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            return int(width) * int(height)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return None


def audio_seconds(data: bytes) -> float | None:
    """The duration an audio file declares (from its header); None for data that is not audio mutagen knows."""
    import mutagen

    try:
        found = mutagen.File(io.BytesIO(data))
    except Exception:  # mutagen raises its own errors (and struct/value errors) for malformed headers
        return None
    length = getattr(getattr(found, "info", None), "length", None)
    return float(length) if isinstance(length, int | float) else None


def check_decoded_size(data: bytes, field: str, limits: DecodedLimits) -> None:
    """A 400 naming ``field`` when the item would decode to more than the limits allow."""
    pixels = image_pixels(data)
    if pixels is not None:
        if limits.max_pixels and pixels > limits.max_pixels:
            raise InvalidRequestError(f"Field '{field}': the image declares {pixels:,} pixels, over "
                                      f"--media-max-pixels ({limits.max_pixels:,})")
        return
    seconds = audio_seconds(data)
    if seconds is not None and limits.max_seconds and seconds > limits.max_seconds:
        raise InvalidRequestError(f"Field '{field}': the recording lasts {seconds:,.0f} s, over --media-max-seconds "
                                  f"({limits.max_seconds:g})")
