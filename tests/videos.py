"""Test videos, made by the real ffmpeg from its own pattern generator."""

from __future__ import annotations

import subprocess
from pathlib import Path


def make_video(path: Path, seconds: float, size: tuple[int, int] = (64, 48), codec: str = "libx264") -> bytes:
    """``seconds`` of ffmpeg's test pattern at 10 frames a second (H.264 in MP4 by default; ``libvpx``
    for VP8 in WebM), written to ``path``; its bytes."""
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi",
                    "-i", f"testsrc=size={size[0]}x{size[1]}:rate=10", "-t", str(seconds), "-pix_fmt", "yuv420p",
                    "-c:v", codec, str(path)], check=True, timeout=120)
    return path.read_bytes()
