"""Values that cross the boundary between HTTP threads and the engine thread (all frozen)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

RANDOM_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: a random seed per sampler

# llama-server's default sampler order (applied between logit bias / grammar and the final pick).
DEFAULT_SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
DEFAULT_DRY_BREAKERS = ("\n", ":", "\"", "*")
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")  # llama-server's
UNQUANTIZED_KV = frozenset({"f32", "f16", "bf16"})
LOAD_MODES = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")  # llama-server's --load-mode values
LAZY_MODES = ("off", "auto", "on")  # --lazy-mode
NUMA_STRATEGIES = ("distribute", "isolate", "numactl")  # --numa
SPLIT_MODES = ("none", "layer", "row", "tensor")  # --split-mode
KV_OVERRIDE_TYPES = ("int", "float", "bool", "str")  # --override-kv KEY=TYPE:VALUE
SAMPLER_LETTERS = {"e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p",
                   "p": "top_p", "m": "min_p", "x": "xtc", "t": "temperature", "a": "adaptive_p"}
SAMPLER_NAMES = {name: name for name in SAMPLER_LETTERS.values()} | {
    "typical_p": "typ_p", "typical": "typ_p", "temp": "temperature", "nucleus": "top_p",
}


@dataclass(frozen=True)
class TensorOverride:
    """Tensors whose name matches ``pattern`` (a regular expression) go to the buffer type named
    ``buffer_type`` (``CPU``, ``CUDA0``, ...): ``--override-tensor`` and what ``--cpu-moe`` means."""

    pattern: str
    buffer_type: str


@dataclass(frozen=True)
class KvOverride:
    """One model metadata override (``--override-kv``); the value's Python type is its GGUF type."""

    key: str
    value: int | float | bool | str


def sampler_names(raw: list[str] | str) -> tuple[str, ...] | None:
    """llama-server's sampler order: names, or a string of one letter per sampler; None when one
    is unknown."""
    names = [SAMPLER_LETTERS.get(letter) for letter in raw] if isinstance(raw, str) else [
        SAMPLER_NAMES.get(name) for name in raw
    ]
    return None if any(name is None for name in names) else tuple(name for name in names if name is not None)


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
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: tuple[str, ...] = DEFAULT_DRY_BREAKERS
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    adaptive_target: float = -1.0  # adaptive-p (with adaptive_p in samplers): tokens near this probability
    adaptive_decay: float = 0.90  # adaptive-p's moving average: history of about 1 / (1 - decay) tokens
    samplers: tuple[str, ...] = DEFAULT_SAMPLERS
    grammar: str = ""
    n_probs: int = 0
    post_sampling_probs: bool = False
    backend_sampling: bool = False  # the chain runs in the model's graph, on its device (-bs; see offloads_sampling)


def banning_end_of_generation(sampling: SamplingParams, eog_tokens: tuple[int, ...]) -> SamplingParams:
    """``ignore_eos`` as llama-server applies (and shows) it: a -inf logit bias on every end-of-generation
    token the request's own biases do not already name. The same params without ``ignore_eos``."""
    if not sampling.ignore_eos:
        return sampling
    named = {token for token, _ in sampling.logit_bias}
    banned = tuple((token, float("-inf")) for token in eog_tokens if token not in named)
    return replace(sampling, logit_bias=sampling.logit_bias + banned) if banned else sampling


class FinishReason(enum.Enum):
    """Why generation ended, in llama-server's ``stop_type`` words."""

    EOS = "eos"
    LIMIT = "limit"
    WORD = "word"


@dataclass(frozen=True, eq=False)
class MediaChunk:
    """An image or audio piece of a prompt. Its ``n_tokens`` embedding rows sit in the prompt at
    ``start`` as placeholder ids (``placeholder``, negative, derived from a hash of the media bytes:
    a slot's cache matches a repeated image like any token, and never half of one). ``n_pos`` is
    the positions it takes (fewer than its rows where the model uses M-RoPE); ``handle`` is the
    backend's tokenized chunk, encoded on the engine thread when the slot reaches it."""

    start: int
    n_tokens: int
    n_pos: int
    key: str
    placeholder: int
    audio: bool
    handle: object


@dataclass(frozen=True)
class ReasoningBudget:
    """A generation's reasoning budget (app/engine/reasoning_budget.py): the thinking's start and
    end tags as token ids, what is forced in when the budget runs out (a message, then the first
    end tag), the budget in tokens (-1: none, only ``end_now``), and whether the prompt opened it."""

    start: tuple[int, ...]
    ends: tuple[tuple[int, ...], ...]
    forced: tuple[int, ...]
    tokens: int = -1
    opened: bool = False


@dataclass(frozen=True)
class SpeculativeParams:
    """A request's ``speculative.n_max`` / ``n_min`` / ``p_min`` (app/engine/speculative.py): None takes
    the server's value. ``n_max`` also bounds n-gram drafts (0: no speculation for this request)."""

    n_max: int | None = None
    n_min: int | None = None
    p_min: float | None = None


@dataclass(frozen=True)
class GenerationRequest:
    """A tokenized prompt and how to continue it. Media rows appear in ``prompt`` as their chunk's
    placeholder id."""

    prompt: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n_predict: int = -1
    stop: tuple[str, ...] = ()
    cache_prompt: bool = True
    id_slot: int = -1
    n_keep: int = 0  # prompt tokens a context shift keeps (-1: the whole prompt)
    n_discard: int = 0  # tokens a context shift drops after them (0: half of the rest)
    n_indent: int = 0
    t_max_predict_ms: int = -1
    lora: tuple[float, ...] | None = None  # adapter scales; None: the global scales at submit time
    deadline: float | None = None  # time.monotonic() by which it ends, whatever it has generated
    media: tuple[MediaChunk, ...] = ()  # in prompt order
    n_cache_reuse: int = 0  # reuse cached chunks of at least this many tokens after the common prefix (0: off)
    timings_per_token: bool = False  # every chunk carries the timings so far
    stream: bool = False  # its client reads the tokens as they come (app/engine/first_chunks.py)
    return_progress: bool = False  # prompt-processing progress as chunks of no text
    reasoning: ReasoningBudget | None = None  # a budget on the thinking, or its end on request
    completion_id: str = ""  # the id a control request names (POST /v1/chat/completions/control)
    speculative: SpeculativeParams = field(default_factory=SpeculativeParams)
    preserved_tokens: frozenset[int] = frozenset()  # special tokens written in the text without --special

    @property
    def offloads_sampling(self) -> bool:
        """Whether the job's sampler chain runs in the model's graph (``backend_sampling``), as llama-server
        decides: never with a grammar or a reasoning budget (llama.cpp's common sampler turns it off for
        both), and here never with ``n_probs`` (the probabilities are read from the logits row)."""
        sampling = self.sampling
        return (sampling.backend_sampling and not sampling.grammar and self.reasoning is None
                and sampling.n_probs == 0)

    def text_tokens(self) -> list[int]:
        """The prompt without its media rows."""
        if not self.media:
            return list(self.prompt)
        rows = {index for chunk in self.media for index in range(chunk.start, chunk.start + chunk.n_tokens)}
        return [token for index, token in enumerate(self.prompt) if index not in rows]


@dataclass(frozen=True)
class TokenProbs:
    """A generated token's log-probability (or, after the sampler chain, probability) and the
    most likely alternatives at that step, best first."""

    token: int
    value: float
    top: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Sampled:
    token: int
    probs: TokenProbs | None = None


@dataclass(frozen=True)
class TokenChunk:
    """Text produced since the previous chunk (held-back stop prefixes and partial UTF-8 excluded)."""

    text: str
    tokens: tuple[int, ...]
    n_predicted: int
    id_slot: int
    probs: tuple[TokenProbs, ...] = ()
    timings: Timings | None = None  # with the request's timings_per_token
    progress: PromptProgress | None = None  # a progress event (no text), with the request's return_progress


@dataclass(frozen=True)
class Timings:
    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    draft_n: int = 0  # draft tokens verified (speculative decoding)
    draft_n_accepted: int = 0  # ... and kept


@dataclass(frozen=True)
class PromptProgress:
    """llama-server's ``prompt_progress``: prompt tokens in all, from the cache, in the cells now
    (the cached ones included), and milliseconds since the prompt started."""

    total: int
    cache: int
    processed: int
    time_ms: int


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
    probs: tuple[TokenProbs, ...] = ()
    deadline_exceeded: bool = False  # ended by its deadline (finish LIMIT), with what it had


JobEvent = TokenChunk | Completion


@dataclass(frozen=True)
class EmbeddingResult:
    """Per input: one vector (pooled), one per token (pooling none), or the rank scores."""

    vectors: tuple[list[list[float]], ...]
    n_tokens: tuple[int, ...]
    pooling: str


@dataclass(frozen=True)
class SlotView:
    """What /slots shows of a slot, read without stopping the engine."""

    id: int
    n_ctx: int
    is_processing: bool
    id_task: int | None
    n_cached: int
    n_prompt_processed: int
    n_prompt_cache: int
    n_decoded: int
    n_remain: int
    has_next_token: bool
    has_new_line: bool
    request: GenerationRequest | None
    speculative: bool = False  # the server drafts for this slot's jobs
