"""The engine's and the scheduler's options: plain values, set once when the server starts
(``app/config/settings.py`` makes them from the flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine.speculative import SpeculationOptions


@dataclass(frozen=True)
class SchedulerOptions:
    cont_batching: bool = True
    prompt_cache_bytes: int | None = 0  # the prompt cache's limit (--cache-ram): 0 off, None no limit
    context_shift: bool = False  # --context-shift
    slot_similarity: float = 0.1  # -sps: an idle slot holding more than this share of a prompt takes it (0: LRU)
    kv_unified: bool = False  # -kvu: the slots share one KV cache
    cache_idle_slots: bool = True  # idle slots' prompts go to the prompt cache (and leave the cells, with -kvu)
    special_output: bool = False  # --special: special tokens (<|im_start|>, ...) are written in the generated text
    speculation: SpeculationOptions = field(default_factory=SpeculationOptions)  # --spec-type and the draft settings
    ctx_checkpoints: int = 32  # --ctx-checkpoints: a slot's most checkpoints of a sliding window (0: none)
    checkpoint_min_step: int = 8192  # --checkpoint-min-step: how close two may be once a slot's are full


@dataclass(frozen=True)
class EngineOptions(SchedulerOptions):
    """The scheduler's options (inherited, declared once) and the engine's own."""

    n_predict_default: int = -1  # -n: the budget of a request that sets none (-1), as llama-server
    sleep_idle_seconds: float = -1
    lora_scales: tuple[float, ...] = ()  # the starting global scale of each --lora adapter
    max_queue: int = 64  # jobs that may wait for a slot; more are refused with OverloadedError
    deadline_seconds: float = 0.0  # every job ends this long after its submission (0: never)
