"""A media item's decoded size, read from its header before anything decodes it: images that declare
more pixels than --media-max-pixels and audio longer than --media-max-seconds are refused."""

from __future__ import annotations

import io
import re
import struct
import wave
import zlib

import pytest
from PIL import Image

from app.handlers.media_limits import DecodedLimits, audio_seconds, check_decoded_size, image_pixels
from app.protocol.errors import InvalidRequestError

LIMITS = DecodedLimits(max_pixels=50_000_000, max_seconds=600.0)


def png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` (its data is a few bytes: a decompression bomb's
    header, which nothing here decodes)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + \
        chunk(b"IEND", b"")


def wav_declaring(seconds: int, rate: int = 8000) -> bytes:
    """A WAV whose header declares ``seconds`` of 8-bit mono (with one second of data behind it)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(rate)
        out.writeframes(b"\x80" * rate)
    data = bytearray(buffer.getvalue())
    data[40:44] = struct.pack("<I", seconds * rate)  # the data chunk's declared size
    return bytes(data)


def real_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_an_images_pixels_and_an_audio_files_duration_come_from_their_headers() -> None:
    assert image_pixels(real_png()) == 1200
    assert image_pixels(png_declaring(8000, 6000)) == 48_000_000
    assert image_pixels(png_declaring(50_000, 50_000)) == 2_500_000_000  # 7.5 GB of RGB, from a 60-byte file
    assert image_pixels(b"not an image") is None
    assert audio_seconds(wav_declaring(60)) == pytest.approx(60, rel=0.01)
    assert audio_seconds(b"not audio") is None


@pytest.mark.parametrize(("data", "message"), [
    (png_declaring(10_000, 10_000), "declares 100,000,000 pixels, over --media-max-pixels (50,000,000)"),
    (png_declaring(50_000, 50_000), "declares 2,500,000,000 pixels"),
    (wav_declaring(3600), "the recording lasts 3,600 s, over --media-max-seconds (600)"),
])
def test_items_over_the_limits_are_refused_naming_the_field(data: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=re.escape(message)) as caught:
        check_decoded_size(data, "messages.0.content.1", LIMITS)
    assert "Field 'messages.0.content.1'" in str(caught.value)


def test_items_within_the_limits_and_unknown_data_pass_to_the_projector() -> None:
    for data in (real_png(), png_declaring(8000, 6000), wav_declaring(60), b"garbage"):
        check_decoded_size(data, "f", LIMITS)
    check_decoded_size(png_declaring(10_000, 10_000), "f", DecodedLimits(0, 0))  # 0: no limit

