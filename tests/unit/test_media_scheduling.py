"""Media chunks in the scheduler and the slots, on the fake backend: media rows go in a decode of
their own before the step's tokens, a chunk needing non-causal attention goes alone and whole, a
slot reuses a cached image whole or not at all, and M-RoPE positions run behind the rows."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from app.engine import Completion, Engine, GenerationRequest
from app.engine.backend import BatchEntry, BatchMedia, BatchToken
from app.engine.errors import MediaError
from app.engine.slots import Job, Slot
from app.engine.types import MediaChunk
from tests.fakes import FakeBackend, completion_of, encode, running_engine

MARKER = "<m>"


@dataclass
class FakeMedia:
    """Each media item's bytes are its rows' count; ``whole_keys`` need non-causal attention."""

    vision: bool = True
    audio: bool = False
    video: bool = False
    marker: str = MARKER
    mrope: bool = False
    whole_keys: set[str] = field(default_factory=set)

    def tokenize(self, text: str, media: Sequence[bytes], add_special: bool, parse_special: bool
                 ) -> tuple[list[int], list[MediaChunk]]:
        pieces = text.split(self.marker)
        if len(pieces) != len(media) + 1:
            raise MediaError(-1, "marker count")
        tokens: list[int] = []
        chunks: list[MediaChunk] = []
        for piece, item in zip(pieces, [*media, None], strict=True):
            tokens.extend(encode(piece))
            if item is None:
                continue
            key = item.decode()
            n_tokens = len(item)
            n_pos = (n_tokens + 1) // 2 if self.mrope else n_tokens
            chunk = MediaChunk(start=len(tokens), n_tokens=n_tokens, n_pos=n_pos, key=key,
                               placeholder=-1 - sum(item), audio=False, handle=None)
            chunks.append(chunk)
            tokens.extend([chunk.placeholder] * n_tokens)
        return tokens, chunks

    def whole(self, chunk: MediaChunk) -> bool:
        return chunk.key in self.whole_keys


@dataclass
class MediaBackend(FakeBackend):
    """The fake backend with a projector: a media decode carries only media rows."""

    media: FakeMedia = field(default_factory=FakeMedia)
    kinds: list[str] = field(default_factory=list)

    def decode(self, entries: Sequence[BatchEntry]) -> None:
        batch = list(entries)
        if all(isinstance(entry, BatchToken) for entry in batch):
            self.kinds.append("tokens")
            super().decode([entry for entry in batch if isinstance(entry, BatchToken)])
            return
        assert all(isinstance(entry, BatchMedia) for entry in batch), "tokens and media rows in one decode"
        self.kinds.append("media")
        rows: list[BatchToken] = []
        for entry in batch:
            assert isinstance(entry, BatchMedia)
            assert entry.pos0 == entry.chunk.start, "a chunk's first row at its prompt position"
            if self.media.whole(entry.chunk):
                assert len(batch) == 1 and entry.first == 0 and entry.count == entry.chunk.n_tokens
            for row in range(entry.first, entry.first + entry.count):
                last = row == entry.first + entry.count - 1
                rows.append(BatchToken(entry.chunk.placeholder, entry.pos0 + row, entry.seq, entry.logits and last))
        super().decode(rows)


@pytest.fixture
def backend() -> MediaBackend:
    return MediaBackend(reply_for=lambda prompt: "ok", n_batch=16)


@pytest.fixture
def engine(backend: MediaBackend) -> Iterator[Engine]:
    with running_engine(backend) as running:
        yield running


def finish(job: Job) -> Completion:
    return completion_of(job, timeout=5)


def media_request(backend: MediaBackend, text: str, media: list[bytes], **fields: object) -> GenerationRequest:
    tokens, chunks = backend.media.tokenize(text, media, True, True)
    return GenerationRequest(prompt=tuple(tokens), media=tuple(chunks), n_predict=2, **fields)  # type: ignore[arg-type]


def test_media_rows_are_decoded_apart_and_before_the_steps_tokens(backend: MediaBackend, engine: Engine) -> None:
    result = finish(engine.submit(media_request(backend, f"ab{MARKER}cd", [b"x" * 6])))
    assert result.n_prompt == 2 + 6 + 2
    # "ab" cannot share a step with the image (the image's rows are decoded first): the image waits a step
    assert backend.kinds[:3] == ["tokens", "media", "tokens"]
    media_batches = [batch for batch, kind in zip(backend.batches, backend.kinds, strict=True) if kind == "media"]
    assert sum(len(batch) for batch in media_batches) == 6


def test_an_image_longer_than_a_batch_is_split_across_steps(backend: MediaBackend, engine: Engine) -> None:
    result = finish(engine.submit(media_request(backend, f"{MARKER}z", [b"y" * 40])))
    assert result.n_prompt == 41
    assert backend.kinds.count("media") >= 3  # 40 rows over n_batch 16


def test_a_non_causal_chunk_is_decoded_whole_and_alone(backend: MediaBackend, engine: Engine) -> None:
    backend.media.whole_keys.add("w" * 5)
    other = engine.submit(GenerationRequest(prompt=tuple(encode("hello there")), n_predict=8))
    job = engine.submit(media_request(backend, f"a{MARKER}b", [b"w" * 5]))
    finish(job)
    finish(other)
    alone = [batch for batch, kind in zip(backend.batches, backend.kinds, strict=True) if kind == "media"]
    assert [len(batch) for batch in alone] == [5]


def test_a_repeated_image_is_reused_and_a_different_one_is_not(backend: MediaBackend, engine: Engine) -> None:
    first = finish(engine.submit(media_request(backend, f"hi {MARKER} there", [b"abcd"])))
    again = finish(engine.submit(media_request(backend, f"hi {MARKER} there", [b"abcd"])))
    other = finish(engine.submit(media_request(backend, f"hi {MARKER} there", [b"abce"])))
    assert first.timings.cache_n == 0
    assert again.timings.cache_n == again.n_prompt - 1
    assert other.timings.cache_n == len(encode("hi "))  # up to the image, none of it


def test_a_request_with_media_to_a_text_only_model_is_refused() -> None:
    with running_engine(FakeBackend()) as running:
        chunk = MediaChunk(start=0, n_tokens=2, n_pos=2, key="k", placeholder=-5, audio=False, handle=None)
        with pytest.raises(MediaError, match="--mmproj"):
            running.submit(GenerationRequest(prompt=(-5, -5, 20), media=(chunk,)))


def test_placeholders_outside_a_media_chunk_are_invalid_tokens(backend: MediaBackend, engine: Engine) -> None:
    request = media_request(backend, f"a{MARKER}", [b"q" * 3])
    with pytest.raises(Exception, match="invalid tokens"):
        engine.submit(GenerationRequest(prompt=(*request.prompt, -9), media=request.media))


def test_a_cached_image_is_reused_whole_or_not_at_all() -> None:
    media = FakeMedia()
    tokens, chunks = media.tokenize(f"ab{MARKER}c", [b"12345"], True, True)
    slot = Slot(0, cached=tokens[:5])  # the image half in the cells
    assert slot.reusable_prefix(tokens, chunks) == 2  # back to the image's start
    slot.cached = list(tokens)
    assert slot.reusable_prefix(tokens, chunks) == len(tokens) - 1


def test_mrope_positions_run_behind_the_rows() -> None:
    media = FakeMedia(mrope=True)
    tokens, chunks = media.tokenize(f"ab{MARKER}cd", [b"123456"], True, True)  # 6 rows, 3 positions
    slot = Slot(0)
    slot.media = list(chunks)
    slot.pending = list(tokens)
    entries = slot.take_prefill(100, media.whole)
    assert [type(entry).__name__ for entry in entries] == ["BatchToken", "BatchToken"]  # text, then the image waits
    entries = slot.take_prefill(100, media.whole)
    assert isinstance(entries[0], BatchMedia) and entries[0].pos0 == 2 and entries[0].count == 6
    tail = entries[1:]
    assert [entry.pos for entry in tail if isinstance(entry, BatchToken)] == [2 + 3, 2 + 3 + 1]
    assert slot.position(len(slot.cached)) == 2 + 3 + 2
