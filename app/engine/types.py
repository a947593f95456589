"""Values that cross the boundary between HTTP threads and the engine thread (all frozen)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

RANDOM_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: a random seed per sampler


@dataclass(frozen=True)
class SamplingParams:
    """llama.cpp sampler-chain settings for one sequence. ``temperature <= 0`` is greedy."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64
    seed: int = RANDOM_SEED
    logit_bias: tuple[tuple[int, float], ...] = ()
    ignore_eos: bool = False
    min_keep: int = 0


class FinishReason(enum.Enum):
    """Why generation ended, in llama-server's ``stop_type`` words."""

    EOS = "eos"
    LIMIT = "limit"
    WORD = "word"


@dataclass(frozen=True)
class GenerationRequest:
    """A tokenized prompt and how to continue it."""

    prompt: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n_predict: int = -1
    stop: tuple[str, ...] = ()
    cache_prompt: bool = True
    id_slot: int = -1


@dataclass(frozen=True)
class TokenChunk:
    """Text produced since the previous chunk (held-back stop prefixes and partial UTF-8 excluded)."""

    text: str
    tokens: tuple[int, ...]
    n_predicted: int
    id_slot: int


@dataclass(frozen=True)
class Timings:
    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float


@dataclass(frozen=True)
class Completion:
    """The final result of a job."""

    text: str
    tokens: tuple[int, ...]
    finish: FinishReason
    stopping_word: str
    truncated: bool
    n_prompt: int
    n_cached_after: int
    id_slot: int
    timings: Timings


JobEvent = TokenChunk | Completion
