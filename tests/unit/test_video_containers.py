"""Which bytes may reach ffmpeg (app/engine/llama/video.py): a video container's signature, never an
image's or an audio file's."""

from __future__ import annotations

from app.engine.llama.video import looks_like_video


def test_only_video_containers_are_taken_for_videos() -> None:
    """The bytes that may reach ffmpeg (app/engine/llama/video.py): a container's signature, never an image's."""
    packet = b"\x47" + bytes(187)
    videos = [b"\x00\x00\x00\x18ftypisom", b"\x00\x00\x00\x08moov", b"\x1a\x45\xdf\xa3webm", b"RIFF\0\0\0\0AVI LIST",
              b"\x00\x00\x01\xba", packet * 3, b"FLV\x01", b"OggS\x00"]
    others = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff\xe0", b"GIF89a" + bytes(400), b"RIFF\0\0\0\0WAVEfmt ",
              b"RIFF\0\0\0\0WEBPVP8 ", b"BM" + bytes(20), packet * 2, b"\x00\x00\x18ftypisom"]
    assert all(looks_like_video(data) for data in videos)
    assert not any(looks_like_video(data) for data in others)
