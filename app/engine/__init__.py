"""The engine: jobs, slots, the scheduler and the llama.cpp backend.

Rule: no Flask, no werkzeug, no request or response JSON. HTTP threads call ``Engine.submit`` and
read the job's events; only ``app.engine.llama`` imports ``llama_cpp``.
"""

from app.engine.backend import Backend, BatchToken, ModelInfo, Sampler, Vocabulary
from app.engine.engine import Engine, EngineOptions
from app.engine.errors import (
    CancelledError,
    ContextExceededError,
    DecodeError,
    EngineError,
    InvalidJobError,
    ModelLoadError,
    NotReadyError,
    OverloadedError,
    SlotBusyError,
    UnsupportedError,
)
from app.engine.scheduler import Scheduler
from app.engine.slots import Job
from app.engine.stats import EngineStats
from app.engine.types import (
    RANDOM_SEED,
    Completion,
    EmbeddingResult,
    FinishReason,
    GenerationRequest,
    JobEvent,
    PromptProgress,
    SamplingParams,
    SlotView,
    Timings,
    TokenChunk,
)

__all__ = [
    "RANDOM_SEED",
    "Backend",
    "BatchToken",
    "CancelledError",
    "Completion",
    "ContextExceededError",
    "DecodeError",
    "EmbeddingResult",
    "Engine",
    "EngineError",
    "EngineOptions",
    "EngineStats",
    "FinishReason",
    "GenerationRequest",
    "InvalidJobError",
    "Job",
    "JobEvent",
    "ModelInfo",
    "ModelLoadError",
    "NotReadyError",
    "OverloadedError",
    "PromptProgress",
    "Sampler",
    "SamplingParams",
    "Scheduler",
    "SlotBusyError",
    "SlotView",
    "Timings",
    "TokenChunk",
    "UnsupportedError",
    "Vocabulary",
]
