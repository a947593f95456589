"""Typed engine failures. They carry data fields, never HTTP statuses or JSON shapes.

    EngineError
    ├── ModelLoadError          the model could not be loaded
    ├── NotReadyError           the model is still loading
    ├── OverloadedError         the job queue is full
    │   └── QueueFullError      ... for a request admitted as one (a predict): retry later
    ├── ContextExceededError    a prompt does not fit in one slot (n_prompt_tokens, n_ctx)
    ├── InvalidJobError         a job the engine cannot run (bad token ids, bad slot id, ...)
    │   └── MediaError          a media item the projector cannot take (item: its index in the prompt)
    ├── UnsupportedError        the model cannot do this (rank pooling without a classification head)
    ├── SlotBusyError           a slot action on a slot that is running a job
    ├── CancelledError          the job was cancelled before it finished
    └── DecodeError             llama_decode failed for the batch that held this job
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine raises."""


class ModelLoadError(EngineError):
    pass


class NotReadyError(EngineError):
    def __init__(self, message: str = "Loading model") -> None:
        super().__init__(message)


class OverloadedError(EngineError):
    pass


class QueueFullError(OverloadedError):
    """A request of many jobs (a predict) found no place in the queue; retry after ``retry_after`` s."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ContextExceededError(EngineError):
    def __init__(self, n_prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(
            f"request ({n_prompt_tokens} tokens) exceeds the available context size "
            f"({n_ctx} tokens), try increasing it"
        )
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


class InvalidJobError(EngineError):
    pass


class MediaError(InvalidJobError):
    """Media item ``item`` (0-based, in prompt order; -1: the prompt as a whole) cannot be used."""

    def __init__(self, item: int, message: str) -> None:
        super().__init__(message)
        self.item = item


class UnsupportedError(EngineError):
    pass


class SlotBusyError(EngineError):
    def __init__(self, slot: int) -> None:
        super().__init__(f"slot {slot} is processing a request; try again when it is idle")
        self.slot = slot


class CancelledError(EngineError):
    def __init__(self, message: str = "the request was cancelled") -> None:
        super().__init__(message)


class DecodeError(EngineError):
    def __init__(self, code: int) -> None:
        reasons = {1: "Context size has been exceeded.", -1: "Invalid input batch.", 2: "Decode aborted."}
        super().__init__(reasons.get(code, "Compute error."))
        self.code = code
