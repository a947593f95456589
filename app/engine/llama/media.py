"""The multimodal projector (``--mmproj``) through libmtmd: prompts with images, audio or video made into
tokens and media chunks (any thread), and a chunk's embedding rows and positions for a decode
(engine thread).

A media chunk's rows stand in the prompt as one placeholder id, negative and derived from a hash of
the media bytes and the chunk's place in the item, so a slot's cache recognises a repeated image
like any token. Encoded rows are kept in a small cache keyed the same way, so an image sent again
to another slot is not encoded again.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from app.engine.errors import MediaError, ModelLoadError
from app.engine.llama.bindings import lc, mt
from app.engine.llama.config import VideoConfig
from app.engine.llama.video import VideoFrames, Videos, looks_like_video
from app.engine.types import MediaChunk

_TEXT_CHUNK = 0
_AUDIO_CHUNK = 2
_ENCODED_CACHE_BYTES = 64 * 1024 * 1024


class _ChunkHandle:
    """One libmtmd input chunk that this process owns; freed with the last reference to it."""

    def __init__(self, pointer: int) -> None:
        self.pointer = pointer
        self._free = weakref.finalize(self, mt.mtmd_input_chunk_free, pointer)


def _placeholder(key: str) -> int:
    """A negative id for a media chunk's rows, never a vocabulary token."""
    return -1 - int(hashlib.sha256(key.encode()).hexdigest()[:7], 16)


class LlamaMedia:
    """libmtmd's context for a projector file on a loaded model."""

    def __init__(self, model: Any, path: str, n_threads: int, use_gpu: bool, image_min_tokens: int,
                 image_max_tokens: int, marker: str, batch_max_tokens: int = 1024,
                 video: VideoConfig | None = None) -> None:
        self._marker_bytes = marker.encode()  # libmtmd keeps the pointer: it lives as long as this object
        params = mt.mtmd_context_params_default()
        params.media_marker = self._marker_bytes
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = True
        params.image_min_tokens = image_min_tokens
        params.image_max_tokens = image_max_tokens
        params.batch_max_tokens = batch_max_tokens
        self._ctx = mt.mtmd_init_from_file(path.encode(), model, params)
        if not self._ctx:
            raise ModelLoadError(f"libmtmd could not load the multimodal projector {path} (is it a projector "
                                 "for this model? its output width must match the model's embedding width)")
        self.vision = bool(mt.mtmd_support_vision(self._ctx))
        self.audio = bool(mt.mtmd_support_audio(self._ctx))
        self.mrope = bool(mt.mtmd_decode_use_mrope(self._ctx))
        self._videos = Videos(self._ctx, self.vision, video or VideoConfig())
        self.video = self._videos.available
        self.marker = marker
        self.n_embd = int(lc.llama_model_n_embd_inp(model))
        self._encoded: OrderedDict[str, Any] = OrderedDict()
        self._encoded_bytes = 0
        self._lock = threading.Lock()  # mtmd_tokenize is not documented as thread-safe (bitmap decoding is)

    # ---- any thread ------------------------------------------------------------------------

    def tokenize(self, text: str, media: Sequence[bytes], add_special: bool, parse_special: bool
                 ) -> tuple[list[int], list[MediaChunk]]:
        if text.count(self.marker) != len(media):
            raise MediaError(-1, f"the prompt has {text.count(self.marker)} media markers ({self.marker}) "
                                 f"for {len(media)} media items")
        images: list[Any] = []
        videos: list[VideoFrames] = []
        bitmaps, digests = [], []
        try:
            for index, data in enumerate(media):
                digests.append(hashlib.sha256(data).hexdigest()[:32])
                if looks_like_video(data):
                    videos.append(self._videos.open(index, data, digests[-1]))
                    bitmaps.append(videos[-1].bitmap)
                else:
                    images.append(self._bitmap(index, data))
                    bitmaps.append(images[-1])
            return self._tokenize(text, bitmaps, digests, add_special, parse_special)
        except MediaError:
            stopped = next((video for video in videos if video.refusal is not None), None)  # read past its bounds
            if stopped is not None:
                raise MediaError(stopped.index, str(stopped.refusal)) from None
            raise
        finally:
            for image in images:
                mt.mtmd_bitmap_free(image)
            for video in videos:
                video.free()

    def _bitmap(self, index: int, data: bytes) -> Any:
        """An image's or audio file's bitmap, decoded by libmtmd's own decoders (never ffmpeg)."""
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bitmap = mt.mtmd_helper_bitmap_init_from_buf(self._ctx, buffer, len(data), False,
                                                     self._videos.no_ffmpeg()) if data else None
        if not bitmap and _looks_like_audio(data) and not self.audio:
            raise MediaError(index, "this is audio, and the model's projector takes images only")
        if not bitmap:
            raise MediaError(index, "the data is not an image, audio or video file that can be decoded (images: "
                                    "JPEG, PNG, BMP, GIF, TGA, PSD, HDR, PNM; audio: WAV, MP3, FLAC; video: what "
                                    "ffmpeg reads, given a projector that takes images), or it is truncated")
        is_audio = bool(mt.mtmd_bitmap_is_audio(bitmap))
        if is_audio and not self.audio:
            mt.mtmd_bitmap_free(bitmap)
            raise MediaError(index, "this is audio, and the model's projector takes images only")
        if not is_audio and not self.vision:
            mt.mtmd_bitmap_free(bitmap)
            raise MediaError(index, "this is an image, and the model's projector takes audio only")
        return bitmap

    def _tokenize(self, text: str, bitmaps: list[Any], digests: list[str], add_special: bool,
                  parse_special: bool) -> tuple[list[int], list[MediaChunk]]:
        data = text.encode("utf-8")
        source = mt.mtmd_input_text()
        source.text = data
        source.text_len = len(data)
        source.add_special = add_special
        source.parse_special = parse_special
        array = (mt.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
        for bitmap, digest in zip(bitmaps, digests, strict=True):
            mt.mtmd_bitmap_set_id(bitmap, digest.encode())
        chunks = mt.mtmd_input_chunks_init()
        try:
            with self._lock:
                code = mt.mtmd_tokenize(self._ctx, chunks, ctypes.byref(source), array, len(bitmaps))
            if code != 0:
                raise MediaError(-1, "the media could not be preprocessed (libmtmd tokenize error "
                                     f"{code})")
            return self._collect(chunks)
        finally:
            mt.mtmd_input_chunks_free(chunks)

    def _collect(self, chunks: Any) -> tuple[list[int], list[MediaChunk]]:
        tokens: list[int] = []
        media: list[MediaChunk] = []
        ordinal: dict[str, int] = {}
        for index in range(mt.mtmd_input_chunks_size(chunks)):
            chunk = mt.mtmd_input_chunks_get(chunks, index)
            kind = mt.mtmd_input_chunk_get_type(chunk)
            if kind == _TEXT_CHUNK:
                count = ctypes.c_size_t(0)
                text = mt.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                tokens.extend(text[i] for i in range(count.value))
                continue
            digest = (mt.mtmd_input_chunk_get_id(chunk) or b"").decode()
            ordinal[digest] = ordinal.get(digest, -1) + 1
            key = f"{digest}:{ordinal[digest]}"
            n_tokens = int(mt.mtmd_input_chunk_get_n_tokens(chunk))
            owned = _ChunkHandle(mt.mtmd_input_chunk_copy(chunk))
            item = MediaChunk(start=len(tokens), n_tokens=n_tokens, n_pos=int(mt.mtmd_input_chunk_get_n_pos(chunk)),
                              key=key, placeholder=_placeholder(key), audio=kind == _AUDIO_CHUNK, handle=owned)
            media.append(item)
            tokens.extend([item.placeholder] * n_tokens)
        return tokens, media

    def whole(self, chunk: MediaChunk) -> bool:
        return bool(mt.mtmd_decode_use_non_causal(self._ctx, _pointer(chunk)))

    # ---- engine thread ---------------------------------------------------------------------

    def embeddings(self, chunk: MediaChunk) -> Any:
        """The chunk's rows (``n_tokens`` by ``n_embd`` floats), encoded now unless cached."""
        cached = self._encoded.get(chunk.key)
        if cached is not None:
            self._encoded.move_to_end(chunk.key)
            return cached
        if mt.mtmd_encode_chunk(self._ctx, _pointer(chunk)) != 0:
            raise MediaError(-1, "the projector could not encode a media item")
        size = chunk.n_tokens * self.n_embd
        rows = (ctypes.c_float * size)()
        ctypes.memmove(rows, mt.mtmd_get_output_embd(self._ctx), size * ctypes.sizeof(ctypes.c_float))
        self._encoded[chunk.key] = rows
        self._encoded_bytes += ctypes.sizeof(rows)
        while self._encoded_bytes > _ENCODED_CACHE_BYTES and len(self._encoded) > 1:
            _, dropped = self._encoded.popitem(last=False)
            self._encoded_bytes -= ctypes.sizeof(dropped)
        return rows

    def positions(self, chunk: MediaChunk, pos0: int) -> list[tuple[int, ...]]:
        """Each row's position: one number, or M-RoPE's four (time, y, x, z) where the model uses it."""
        if not self.mrope:
            return [(pos0 + row,) for row in range(chunk.n_tokens)]
        if chunk.audio:
            return [(pos0 + row,) * 4 for row in range(chunk.n_tokens)]
        image = mt.mtmd_input_chunk_get_tokens_image(_pointer(chunk))
        out = (mt.mtmd_decoder_pos * chunk.n_tokens)()
        mt.mtmd_helper_image_get_decoder_pos(image, pos0, out)
        return [(p.t, p.y, p.x, p.z) for p in out]

    def close(self) -> None:
        self._encoded.clear()
        if self._ctx:
            mt.mtmd_free(self._ctx)
            self._ctx = None


def _looks_like_audio(data: bytes) -> bool:
    """libmtmd's own test for an audio file (WAV, MP3, FLAC): it decodes audio only when the
    projector takes audio, so an audio file to a vision projector fails as undecodable."""
    return ((data[:4] == b"RIFF" and data[8:12] == b"WAVE") or data[:3] == b"ID3" or data[:4] == b"fLaC"
            or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0))


def _pointer(chunk: MediaChunk) -> int:
    handle = chunk.handle
    assert isinstance(handle, _ChunkHandle)
    return handle.pointer
