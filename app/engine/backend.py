"""The seam between the scheduler and llama.cpp: what one engine step needs from a model.

``LlamaBackend`` (``app/engine/llama/``) is the real implementation, in the only package that
imports ``llama_cpp``. Unit tests use a small fake with the same interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.engine.types import MediaChunk, Sampled, SamplingParams


@dataclass(frozen=True)
class ModelInfo:
    """Facts about the loaded model, read once at load time."""

    path: str
    name: str
    vocab_type: int
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_params: int
    size: int
    bos_token: str
    eos_token: str
    add_bos: bool
    chat_template: str | None
    description: str
    build_info: str
    pooling: str = "unspecified"  # what the model declares; "rank" for a reranker
    ftype: str = ""  # the weights' file type (quantization), llama.cpp's name: "Q4_1", "Q4_K - Medium", ...
    add_eos: bool = False  # the tokenizer ends an input with EOS (rerank prompts follow it)
    add_sep: bool = False  # ... and separates a pair with SEP
    rerank_template: str | None = None  # tokenizer.chat_template.rerank: "{query}" and "{document}" in a prompt

    def outside_vocabulary(self, tokens: Sequence[int]) -> list[int]:
        """The token ids of ``tokens`` that this model's vocabulary does not have (the one owner
        of the token range: prompts and detokenize are checked by it)."""
        return [token for token in tokens if not 0 <= token < self.n_vocab]


@dataclass(frozen=True)
class BatchToken:
    """One token of a decode batch: its id, its position in its sequence, the sequence, and
    whether logits are wanted for it."""

    token: int
    pos: int
    seq: int
    logits: bool


@dataclass(frozen=True)
class BatchMedia:
    """Embedding rows ``[first, first + count)`` of a media chunk for sequence ``seq``; the chunk's
    first row is at position ``pos0`` (its rows' positions follow from it, M-RoPE included), and
    ``logits`` asks for the last row's logits. Takes ``count`` places of a decode's ``n_batch``."""

    chunk: MediaChunk
    first: int
    count: int
    pos0: int
    seq: int
    logits: bool


BatchEntry = BatchToken | BatchMedia


class Media(Protocol):
    """The multimodal projector (``--mmproj``): what it takes, and prompts with media made into
    tokens and media chunks. ``tokenize`` is safe to call from any thread."""

    @property
    def vision(self) -> bool: ...

    @property
    def audio(self) -> bool: ...

    @property
    def video(self) -> bool:
        """Whether videos are taken (frames to a vision projector, decoded by ffmpeg)."""

    @property
    def marker(self) -> str:
        """The text that stands for one media item in a prompt."""

    def tokenize(self, text: str, media: Sequence[bytes], add_special: bool, parse_special: bool
                 ) -> tuple[list[int], list[MediaChunk]]:
        """``text`` holds one ``marker`` per item of ``media`` (image, audio or video file bytes, in order):
        the prompt (placeholder ids for media rows) and its media chunks. Raises ``MediaError``."""

    def whole(self, chunk: MediaChunk) -> bool:
        """Whether the chunk must be decoded whole and alone (non-causal attention over it)."""


@dataclass(frozen=True)
class SequenceState:
    """One sequence's KV state read out of the context (opaque bytes the backend wrote)."""

    data: object
    nbytes: int


class Sampler(Protocol):
    def sample(self, batch_index: int) -> Sampled:
        """Sample (and accept) the next token from the logits of batch entry ``batch_index``, with
        its probabilities when the sampler was made with ``n_probs``."""

    def accept(self, token: int) -> None:
        """Take ``token`` as chosen without sampling (a forced token): the chain's state (grammar,
        penalties) follows it."""

    def free(self) -> None: ...

    @property
    def draft_room(self) -> int | None:
        """The longest draft one step may verify with this sampler (its chain in the graph takes only so many
        outputs a sequence); None: no bound of its own."""


class Vocabulary(Protocol):
    """Read-only tokenizer access; safe to call from any thread."""

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]: ...

    def piece(self, token: int, special: bool) -> bytes: ...

    def is_eog(self, token: int) -> bool: ...

    def eog_tokens(self) -> tuple[int, ...]: ...

    def apply_builtin_template(
        self, template: str | None, messages: Sequence[tuple[str, str]], add_assistant: bool
    ) -> str: ...

    def json_schema_grammar(self, schema: object) -> str:
        """GBNF for a JSON schema; raises ValueError for a schema that cannot be converted."""

    def special_tokens(self) -> dict[str, int]:
        """Ids of the FIM and other special tokens the model defines (absent ones are left out)."""


class Embedder(Protocol):
    """A context for embeddings on the same model: several inputs per decode."""

    pooling: str
    n_ctx: int
    n_seq: int
    n_embd: int

    def embed(self, inputs: Sequence[Sequence[int]]) -> list[list[list[float]]]:
        """Per input: one vector (pooled; for rank pooling the scores) or one per token (none)."""

    def close(self) -> None: ...


class Backend(Protocol):
    """A loaded model and one context with ``n_seq`` independent sequences (KV per sequence)."""

    @property
    def info(self) -> ModelInfo: ...

    @property
    def vocab(self) -> Vocabulary: ...

    @property
    def n_seq(self) -> int: ...

    @property
    def n_ctx_seq(self) -> int:
        """Context tokens of each sequence."""

    @property
    def n_batch(self) -> int:
        """Most tokens one ``decode`` may carry."""

    @property
    def media(self) -> Media | None:
        """The multimodal projector, or None when the model takes text only."""

    def decode(self, batch: Sequence[BatchEntry]) -> None:
        """Run one decode of tokens and media rows (media encoded first, when not yet); raises
        ``DecodeError``. The batch holds at most ``n_batch`` tokens and rows; a batch entry's logits
        are at the index of its (last) row."""

    def new_sampler(self, params: SamplingParams, seq: int | None = None) -> Sampler:
        """A sampler chain; with ``seq``, run in the model's graph for that sequence (backend sampling)
        until it is freed, where the backend can, else on the CPU as without it."""

    def top_token(self, batch_index: int) -> tuple[int, float]:
        """The most likely next token at batch entry ``batch_index`` of the last decode, and its
        probability (a draft model's greedy pick)."""

    @property
    def draft(self) -> Backend | None:
        """The draft model for speculative decoding (``--spec-draft-model``): a backend of its own
        with the same slots, or None."""

    @property
    def decode_fills_cpu(self) -> bool:
        """Whether a decode keeps every usable core busy (the model on the CPU, as many threads as
        cores): the scheduler then lets a stream's first token be written first (app/engine/first_chunks.py)."""

    @property
    def can_rewind(self) -> bool:
        """Whether ``forget`` can drop a sequence's last cells alone (not for recurrent models), as
        rejecting draft tokens needs."""

    def copy_sequence(self, source: int, target: int) -> None:
        """Make ``target`` hold the same KV cells as ``source`` (for n > 1: one prompt, many
        continuations)."""

    def shift_sequence(self, seq: int, keep: int, discard: int) -> bool:
        """Context shift: drop the cells of positions ``[keep, keep + discard)`` and move the later
        ones back by ``discard``. False when this context cannot shift."""

    def move_cells(self, seq: int, source: int, target: int, count: int) -> bool:
        """Cache reuse: drop the cells of positions ``[target, source)`` and move the ``count`` cells
        from ``source`` to ``target`` (later cells keep their positions). False when this context
        cannot shift."""

    def forget(self, seq: int, from_pos: int) -> bool:
        """Drop the KV cells of ``seq`` from position ``from_pos`` on. False when only the whole
        sequence could be dropped."""

    @property
    def n_swa(self) -> int:
        """The sliding window of a model with sliding-window attention (0: none, or ``--swa-full`` keeps every
        cell): a sequence's window cells are kept for its last positions only (app/engine/checkpoints.py)."""

    @property
    def n_ubatch(self) -> int:
        """Tokens one physical batch of a decode takes."""

    def pos_min(self, seq: int) -> int:
        """The lowest position ``seq`` still holds a cell for (-1: none)."""

    def pos_max(self, seq: int) -> int:
        """The highest position ``seq`` holds a cell for (-1: none)."""

    def read_window(self, seq: int) -> SequenceState:
        """A copy of ``seq``'s sliding-window cells alone (llama.cpp's partial state): a checkpoint."""

    def write_window(self, seq: int, state: SequenceState) -> bool:
        """Put back the window cells ``read_window`` gave; False when they do not fit."""

    def embedder(self) -> Embedder:
        """The embedding context (made on first use)."""

    def set_lora(self, scales: tuple[float, ...]) -> None:
        """Adapter scales for the following decodes."""

    def read_sequence(self, seq: int) -> SequenceState:
        """A copy of ``seq``'s KV state, in host memory."""

    def write_sequence(self, seq: int, state: SequenceState) -> bool:
        """Replace ``seq``'s KV cells with a state ``read_sequence`` gave; False (and ``seq``
        empty) when it does not fit this context."""

    def save_sequence(self, seq: int, path: str, tokens: Sequence[int]) -> int:
        """Write ``seq``'s KV state to ``path``; the bytes written."""

    def load_sequence(self, seq: int, path: str) -> tuple[list[int], int] | None:
        """Read a saved state into ``seq``: its tokens and the bytes read, or None."""

    def close(self) -> None: ...
