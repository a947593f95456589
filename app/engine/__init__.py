"""The engine: jobs, slots, the scheduler and the llama.cpp backend.

Rule: no Flask, no werkzeug, no request or response JSON. HTTP threads call ``Engine.submit`` and
read the job's events; only ``app.engine.llama`` imports ``llama_cpp``.
"""

from typing import TYPE_CHECKING

from app.engine.lazy import lazy_exports

if TYPE_CHECKING:
    from app.engine.backend import Backend, BatchToken, ModelInfo, Sampler, Vocabulary
    from app.engine.engine import Engine
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
    from app.engine.options import EngineOptions
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

_LAZY = {
    "Backend": "app.engine.backend",
    "BatchToken": "app.engine.backend",
    "CancelledError": "app.engine.errors",
    "Completion": "app.engine.types",
    "ContextExceededError": "app.engine.errors",
    "DecodeError": "app.engine.errors",
    "EmbeddingResult": "app.engine.types",
    "Engine": "app.engine.engine",
    "EngineError": "app.engine.errors",
    "EngineOptions": "app.engine.options",
    "EngineStats": "app.engine.stats",
    "FinishReason": "app.engine.types",
    "GenerationRequest": "app.engine.types",
    "InvalidJobError": "app.engine.errors",
    "Job": "app.engine.slots",
    "JobEvent": "app.engine.types",
    "ModelInfo": "app.engine.backend",
    "ModelLoadError": "app.engine.errors",
    "NotReadyError": "app.engine.errors",
    "OverloadedError": "app.engine.errors",
    "PromptProgress": "app.engine.types",
    "RANDOM_SEED": "app.engine.types",
    "Sampler": "app.engine.backend",
    "SamplingParams": "app.engine.types",
    "Scheduler": "app.engine.scheduler",
    "SlotBusyError": "app.engine.errors",
    "SlotView": "app.engine.types",
    "Timings": "app.engine.types",
    "TokenChunk": "app.engine.types",
    "UnsupportedError": "app.engine.errors",
    "Vocabulary": "app.engine.backend",
}


# the server's master process reads its settings (which name engine types) without importing the
# scheduler; the worker imports the rest while its model loads
__getattr__ = lazy_exports(__name__, _LAZY)

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
