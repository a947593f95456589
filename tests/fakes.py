"""A small fake llama.cpp backend with the real Backend interface, for engine unit tests.

Vocabulary: token ``10 + b`` is the byte ``b``; token 2 is the end-of-generation token. The fake
"model" keeps a mirror of every sequence's KV cells (and checks that positions are contiguous, as
llama.cpp does), and answers each prompt with a scripted reply: after the last ``>`` of a
sequence, the i-th generated token is the i-th byte of the reply, then EOS.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from app.engine import (
    BatchToken,
    Completion,
    DecodeError,
    Engine,
    EngineOptions,
    InvalidJobError,
    Job,
    ModelInfo,
    SamplingParams,
)
from app.engine.backend import BatchEntry, SequenceState
from app.engine.types import Sampled, TokenProbs

EOS = 2
OFFSET = 10
MARK = OFFSET + ord(">")


def encode(text: str) -> list[int]:
    return [OFFSET + byte for byte in text.encode("utf-8")]


class FakeVocabulary:
    n_vocab = OFFSET + 256

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        return encode(text)

    def piece(self, token: int, special: bool) -> bytes:
        return bytes([token - OFFSET]) if token >= OFFSET else b""

    def is_eog(self, token: int) -> bool:
        return token == EOS

    def eog_tokens(self) -> tuple[int, ...]:
        return (EOS,)

    def json_schema_grammar(self, schema: object) -> str:
        return 'root ::= "{}"'

    def special_tokens(self) -> dict[str, int]:
        return {}

    def apply_builtin_template(
        self, template: str | None, messages: Sequence[tuple[str, str]], add_assistant: bool
    ) -> str:
        text = "".join(f"<{role}>{content}" for role, content in messages)
        return text + ("<assistant>" if add_assistant else "")


class FakeSampler:
    def __init__(self, backend: FakeBackend, params: SamplingParams) -> None:
        self.backend = backend
        self.params = params
        self.freed = False
        self.accepted: list[int] = []  # forced tokens
        self.draft_room: int | None = None

    def sample(self, batch_index: int) -> Sampled:
        token = self.backend.next_token(batch_index, self.params)
        if self.params.n_probs:
            return Sampled(token, TokenProbs(token, -0.5, ((token, -0.5), (EOS, -1.5))[: self.params.n_probs]))
        return Sampled(token)

    def accept(self, token: int) -> None:
        self.accepted.append(token)

    def free(self) -> None:
        self.freed = True


def _text(tokens: Sequence[int]) -> str:
    return bytes(t - OFFSET for t in tokens if t >= OFFSET).decode("utf-8", "replace")


@dataclass
class FakeEmbedder:
    """Pooled "embeddings": [number of tokens, mean token id] per input."""

    pooling: str = "mean"
    n_ctx: int = 64
    n_seq: int = 4
    n_embd: int = 2
    calls: list[int] = field(default_factory=list)

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[list[list[float]]]:
        assert sum(len(t) for t in inputs) <= self.n_ctx and len(inputs) <= self.n_seq
        self.calls.append(len(inputs))
        return [[[float(len(t)), sum(t) / len(t)]] for t in inputs]

    def close(self) -> None:
        pass


@dataclass
class FakeBackend:
    reply_for: Callable[[str], str] = lambda prompt: "Hello, world!"
    n_seq: int = 4
    n_ctx_seq: int = 256
    n_batch: int = 64
    vocab: FakeVocabulary = field(default_factory=FakeVocabulary)
    batches: list[list[BatchToken]] = field(default_factory=list)
    kv: dict[int, list[int]] = field(default_factory=dict)
    fail_decodes: int = 0
    copies: list[tuple[int, int]] = field(default_factory=list)
    decode_seconds: float = 0.0
    poison: int | None = None
    lora_history: list[tuple[float, ...]] = field(default_factory=list)
    decodes_under_lora: list[tuple[frozenset[int], tuple[float, ...]]] = field(default_factory=list)
    _embedder: FakeEmbedder = field(default_factory=lambda: FakeEmbedder())
    closed: bool = False
    shifts: list[tuple[int, int, int]] = field(default_factory=list)
    moves: list[tuple[int, int, int, int]] = field(default_factory=list)  # cache reuse (move_cells)
    state_reads: int = 0
    state_writes: int = 0
    media: Any = None  # a projector (tests/unit/test_media_scheduling.py gives one)
    rerank_template: str | None = None
    draft: FakeBackend | None = None  # a draft model (speculative decoding)
    can_rewind: bool = True
    decode_fills_cpu: bool = False  # the scheduler paces streams' first chunks (app/engine/first_chunks.py)
    confidence: float = 1.0  # what top_token says of its pick (a draft model's p_min test)
    forgets: list[tuple[int, int]] = field(default_factory=list)
    n_swa: int = 0  # a sliding window: each sequence keeps cells for its last n_swa + n_ubatch positions only
    n_ubatch: int = 16
    held_from: dict[int, int] = field(default_factory=dict)  # the lowest position a sequence still holds
    window_writes: int = 0  # checkpoints restored

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(
            path="/models/fake.gguf", name="fake", vocab_type=2, n_vocab=self.vocab.n_vocab,
            n_ctx_train=1024, n_embd=8, n_params=1000, size=4000, bos_token="", eos_token="",
            add_bos=False, chat_template=None, description="fake", build_info="b0-fake",
            rerank_template=self.rerank_template,
        )

    def decode(self, entries: Sequence[BatchEntry]) -> None:
        batch = [entry for entry in entries if isinstance(entry, BatchToken)]
        assert len(batch) == len(entries), "media rows sent to a backend without a projector"
        assert 0 < len(batch) <= self.n_batch, f"batch of {len(batch)} tokens over n_batch {self.n_batch}"
        if self.decode_seconds:
            time.sleep(self.decode_seconds)
        if self.poison is not None and any(entry.token == self.poison for entry in batch):
            raise DecodeError(-3)
        if self.fail_decodes:
            self.fail_decodes -= 1
            raise DecodeError(-3)
        for entry in batch:
            cells = self.kv.setdefault(entry.seq, [])
            assert entry.pos == len(cells), f"seq {entry.seq}: position {entry.pos} after {len(cells)} cells"
            assert entry.pos < self.n_ctx_seq, "position beyond the slot context"
            cells.append(entry.token)
        if self.n_swa:  # as llama.cpp prunes a sequence's window cells
            for seq in {entry.seq for entry in batch}:
                self.held_from[seq] = max(self.held_from.get(seq, 0), len(self.kv[seq]) - self.n_swa - self.n_ubatch)
        self.batches.append(list(batch))
        self.decodes_under_lora.append((frozenset(entry.seq for entry in batch),
                                        self.lora_history[-1] if self.lora_history else ()))

    def next_token(self, batch_index: int, params: SamplingParams) -> int:
        entry = self.batches[-1][batch_index]
        assert entry.logits, "sampling a batch entry that has no logits"
        history = self.kv[entry.seq][: entry.pos + 1]  # what the logits at this entry have seen
        mark = len(history) - 1 - history[::-1].index(MARK) if MARK in history else -1
        prompt = _text(history[:mark])
        generated = history[mark + 1:]
        reply = encode(self.reply_for(prompt))
        token = reply[len(generated)] if len(generated) < len(reply) else EOS
        banned = {tok for tok, bias in params.logit_bias if bias == float("-inf")}
        return OFFSET + ord(".") if token in banned else token

    def top_token(self, batch_index: int) -> tuple[int, float]:
        return self.next_token(batch_index, SamplingParams()), self.confidence

    def new_sampler(self, params: SamplingParams, seq: int | None = None) -> FakeSampler:
        if params.grammar and "root ::=" not in params.grammar:  # as llama.cpp's parser refuses it
            raise InvalidJobError("Failed to initialize samplers: no root rule")
        return FakeSampler(self, params)

    def copy_sequence(self, source: int, target: int) -> None:
        self.kv[target] = list(self.kv.get(source, []))
        self.held_from[target] = self.held_from.get(source, 0)
        self.copies.append((source, target))

    def shift_sequence(self, seq: int, keep: int, discard: int) -> bool:
        del self.kv.setdefault(seq, [])[keep:keep + discard]
        self.shifts.append((seq, keep, discard))
        return True

    def move_cells(self, seq: int, source: int, target: int, count: int) -> bool:
        cells = self.kv.setdefault(seq, [])
        # positions [target + count, source + count) are left empty (-1); later cells keep theirs
        cells[target:source + count] = cells[source:source + count] + [-1] * (source - target)
        self.moves.append((seq, source, target, count))
        return True

    def forget(self, seq: int, from_pos: int) -> bool:
        cells = self.kv.setdefault(seq, [])
        if from_pos < len(cells):
            self.forgets.append((seq, from_pos))
        del cells[from_pos:]
        if from_pos <= self.held_from.get(seq, 0):
            self.held_from[seq] = 0 if from_pos <= 0 else from_pos  # nothing of the window is left
        return True

    def pos_min(self, seq: int) -> int:
        cells = self.kv.get(seq, [])
        held = self.held_from.get(seq, 0)
        return held if held < len(cells) else -1

    def pos_max(self, seq: int) -> int:
        return len(self.kv.get(seq, [])) - 1

    def read_window(self, seq: int) -> SequenceState:
        return SequenceState((self.held_from.get(seq, 0), list(self.kv.get(seq, []))), 8)

    def write_window(self, seq: int, state: SequenceState) -> bool:
        held, cells = cast(tuple[int, list[int]], state.data)
        self.held_from[seq] = held
        self.kv[seq] = list(cells) + self.kv.get(seq, [])[len(cells):]  # the checkpoint's cells, the rest kept
        self.window_writes += 1
        return True

    def embedder(self) -> FakeEmbedder:
        return self._embedder

    def set_lora(self, scales: tuple[float, ...]) -> None:
        self.lora_history.append(scales)

    def read_sequence(self, seq: int) -> SequenceState:
        cells = list(self.kv.get(seq, []))
        self.state_reads += 1
        return SequenceState(cells, 4 * len(cells))

    def write_sequence(self, seq: int, state: SequenceState) -> bool:
        assert isinstance(state.data, list)
        self.kv[seq] = list(state.data)
        self.held_from[seq] = max(0, len(state.data) - self.n_swa - self.n_ubatch) if self.n_swa else 0
        self.state_writes += 1
        return True

    def save_sequence(self, seq: int, path: str, tokens: Sequence[int]) -> int:
        with open(path, "w") as handle:
            handle.write(",".join(map(str, tokens)))
        return len(tokens) * 4

    def load_sequence(self, seq: int, path: str) -> tuple[list[int], int] | None:
        try:
            with open(path) as handle:
                text = handle.read()
        except OSError:
            return None
        tokens = [int(t) for t in text.split(",") if t]
        self.kv[seq] = list(tokens)
        return tokens, len(tokens) * 4

    def close(self) -> None:
        self.closed = True

    def max_sequences_in_one_decode(self) -> int:
        return max(len({entry.seq for entry in batch}) for batch in self.batches)


def completion_of(job: Job, timeout: float = 10) -> Completion:
    """Wait for ``job``'s completion (its chunks skipped); an error event fails the test."""
    while True:
        _, event = job.sink.get(timeout=timeout)
        if isinstance(event, Completion):
            return event
        assert not isinstance(event, Exception), event


@contextmanager
def running_engine(backend: FakeBackend, options: EngineOptions | None = None) -> Iterator[Engine]:
    """An engine on ``backend``, loaded, and stopped afterwards."""
    engine = Engine(lambda: backend, options or EngineOptions())
    engine.start()
    assert engine.wait_ready(5)
    try:
        yield engine
    finally:
        engine.stop()
