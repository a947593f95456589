"""Videos in prompts, through libmtmd's video helper: it runs ffprobe and ffmpeg (``--video-ffmpeg-dir``,
else PATH) over the file's bytes and hands libmtmd its frames, each an image to the projector, with text
timestamps among them (``--video-fps``, ``--video-timestamp-interval``), as llama-server does.

Only bytes that begin as a video container (``looks_like_video``) ever reach ffmpeg: anything else a
request sends is an image or audio file to libmtmd's own decoders, or refused. A video is decoded whole
before its tokens are known, so it is measured first (ffprobe's size, rate and frame count, when the
container tells them) and refused when its frames together would exceed ``VideoConfig``'s bounds, and
its reading stops at the first frame past them."""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
from typing import Any

from app.engine.errors import MediaError
from app.engine.llama.bindings import mt
from app.engine.llama.config import VideoConfig

log = logging.getLogger(__name__)

# libmtmd hands bytes that are neither an image nor audio to ffprobe/ffmpeg; for those that are not a
# video, that path is pointed at a directory that holds no binary.
NO_FFMPEG_DIR = b"/nonexistent/vertex-llama-not-a-video"
_MPEG_TS_PACKET = 188


def looks_like_video(data: bytes) -> bool:
    """Whether the bytes begin as a video container ffmpeg reads: MP4/MOV/3GP (an ``ftyp``, ``moov``,
    ``mdat``, ``wide`` or ``free`` box first), Matroska/WebM, AVI, MPEG program or transport stream (three
    packets' sync bytes), FLV, Ogg."""
    return (data[4:8] in (b"ftyp", b"moov", b"mdat", b"wide", b"free")
            or data[:4] == b"\x1a\x45\xdf\xa3"
            or (data[:4] == b"RIFF" and data[8:12] == b"AVI ")
            or data[:4] == b"\x00\x00\x01\xba"
            or (len(data) > 2 * _MPEG_TS_PACKET and data[:3] != b"GIF"  # a GIF starts with 0x47 too
                and data[0] == data[_MPEG_TS_PACKET] == data[2 * _MPEG_TS_PACKET] == 0x47)
            or data[:3] == b"FLV"
            or data[:4] == b"OggS")


def ffmpeg_dir(config: VideoConfig) -> str | None:
    """The directory holding both ffmpeg and ffprobe (``--video-ffmpeg-dir``, else the first on PATH
    that holds ffmpeg), or None when they are not both there."""
    if config.ffmpeg_dir is not None:
        found = [shutil.which(name, path=config.ffmpeg_dir) for name in ("ffmpeg", "ffprobe")]
        return config.ffmpeg_dir if all(found) else None
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        return None
    directory = os.path.dirname(ffmpeg)
    return directory if shutil.which("ffprobe", path=directory) else None


class Videos:
    """What this projector does with videos: whether it takes them (a vision projector, libmtmd built
    with video, ffmpeg and ffprobe found), and each video opened as frames for one tokenization."""

    def __init__(self, ctx: Any, vision: bool, config: VideoConfig) -> None:
        self._ctx = ctx
        self._config = config
        self._built = vision and bool(mt.mtmd_helper_support_video(ctx))
        self._dir = ffmpeg_dir(config) if self._built else None
        self.available = self._dir is not None
        if vision:
            where = config.ffmpeg_dir or "PATH"
            log.info("video input: %s", f"on (ffmpeg and ffprobe in {self._dir})" if self.available
                     else f"off (no ffmpeg with an ffprobe beside it in {where}: --video-ffmpeg-dir)")

    def no_ffmpeg(self) -> Any:
        """libmtmd's decoding options for an item that is not a video: no ffmpeg at all."""
        options = mt.mtmd_helper_init_opt_default()
        options.video_params.ffmpeg_bin_dir = NO_FFMPEG_DIR
        return options

    def open(self, index: int, data: bytes, digest: str) -> VideoFrames:
        """The video's frames, probed and checked against the bounds; raises ``MediaError``."""
        if not self.available:
            raise MediaError(index, "this is a video, and this server has no ffmpeg and ffprobe to decode it "
                                    "(install them, or give --video-ffmpeg-dir)" if self._built else
                                    "this is a video, and this server's projector or build takes no video")
        assert self._dir is not None
        params = mt.mtmd_helper_video_init_params_default()
        params.ffmpeg_bin_dir = self._dir.encode()
        params.fps_target = self._config.fps
        params.timestamp_interval_ms = self._config.timestamp_interval_ms
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        video = mt.mtmd_helper_video_init_from_buf(self._ctx, buffer, len(data), params)
        if not video:
            raise MediaError(index, "the video could not be read (ffprobe and ffmpeg found no video stream in "
                                    "it, or it is truncated)")
        frames = VideoFrames(self._ctx, index, video, digest, self._config)
        try:
            frames.check_estimate()
        except MediaError:
            frames.free()
            raise
        return frames


class VideoFrames:
    """One video's frames and timestamps, read by libmtmd while it tokenizes (a lazy bitmap whose
    callback is this object's): each frame gets an id from the video's digest, and reading stops with
    an error once the frames exceed the bounds (``refusal`` then says why)."""

    def __init__(self, ctx: Any, index: int, video: Any, digest: str, config: VideoConfig) -> None:
        self.index = index
        self.refusal: str | None = None
        self._video = video
        self._digest = digest
        self._config = config
        self._frames = 0
        self._pixels = 0
        info = mt.mtmd_helper_video_get_info(video)
        self._fps = float(info.fps)
        self._estimate = (int(info.n_frames), int(info.width), int(info.height))
        self._callback = mt.mtmd_bitmap_lazy_callback(self._next)  # kept: libmtmd calls it while tokenizing
        self.bitmap = mt.mtmd_bitmap_init_lazy(ctx, digest.encode(), None, self._callback)

    def check_estimate(self) -> None:
        """Refuse, before anything is decoded, a video that ffprobe says exceeds the bounds."""
        frames, width, height = self._estimate
        if frames > 0:
            self._refuse_over(frames, frames * width * height, width, height)

    def _refuse_over(self, frames: int, pixels: int, width: int, height: int) -> None:
        seconds = frames / self._fps if self._fps > 0 else 0.0
        limit = self._config
        if limit.max_seconds and seconds > limit.max_seconds:
            raise MediaError(self.index, f"the video lasts at least {seconds:,.1f} s, over --media-max-seconds "
                                         f"({limit.max_seconds:g})")
        if limit.max_pixels and pixels > limit.max_pixels:
            raise MediaError(self.index, f"the video decodes to at least {frames:,} frames of {width} x {height} at "
                                         f"{self._fps:g} frames a second, {pixels:,} pixels together, over "
                                         f"--media-max-pixels ({limit.max_pixels:,}): lower --video-fps, send a "
                                         "shorter or smaller video, or raise --media-max-pixels")

    def _next(self, _: int, __: Any, out_bitmap: Any, out_text: Any) -> int:
        try:
            return self._read(out_bitmap, out_text)
        except Exception as exc:  # an error must not cross into libmtmd (ctypes would answer 0: "go on")
            log.exception("reading a video's frames failed")
            self.refusal = f"the video's frames could not be read ({type(exc).__name__})"
            return -2

    def _read(self, out_bitmap: Any, out_text: Any) -> int:
        code = int(mt.mtmd_helper_video_read_next(self._video, out_bitmap, out_text))
        frame = out_bitmap[0]
        if code != 0 or not frame:
            return code
        width, height = int(mt.mtmd_bitmap_get_nx(frame)), int(mt.mtmd_bitmap_get_ny(frame))
        self._frames += 1
        self._pixels += width * height
        try:
            self._refuse_over(self._frames, self._pixels, width, height)
        except MediaError as exc:
            self.refusal = str(exc)
            mt.mtmd_bitmap_free(frame)
            out_bitmap[0] = None
            return -2
        mt.mtmd_bitmap_set_id(frame, f"{self._digest}+{self._frames - 1}".encode())
        return 0

    def free(self) -> None:
        if self.bitmap:
            mt.mtmd_bitmap_free(self.bitmap)
            self.bitmap = None
        if self._video:
            mt.mtmd_helper_video_free(self._video)
            self._video = None
