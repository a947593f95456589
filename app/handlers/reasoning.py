"""Reasoning text: ``<think>...</think>`` split out of the content into ``reasoning_content``.

``reasoning_format`` follows llama-server: ``none`` leaves the text as generated; ``auto`` and
``deepseek`` split the thinking out; ``deepseek-legacy`` splits it out and also keeps it in the
content. When the prompt itself ends with ``<think>`` (a template that opens the thinking for the
model), the generated text starts inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.text import partial_stop_length

OPEN = "<think>"
CLOSE = "</think>"
FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")


@dataclass(frozen=True)
class Split:
    content: str
    reasoning: str | None


def split_reasoning(text: str, reasoning_format: str, opened_by_prompt: bool) -> Split:
    if reasoning_format == "none":
        return Split(text, None)
    stripped = text.lstrip()
    if stripped.startswith(OPEN):
        inner = stripped[len(OPEN):]
    elif opened_by_prompt:
        inner = text
    else:
        return Split(text, None)
    thinking, closed, rest = inner.partition(CLOSE)
    content = rest.lstrip() if closed else ""
    if reasoning_format == "deepseek-legacy":
        content = text
    return Split(content, thinking.strip())


class ReasoningStream:
    """The streaming form of ``split_reasoning``: feed text pieces, get (reasoning, content) pieces.
    A partial ``<think>`` or ``</think>`` tag is held back until it is complete."""

    def __init__(self, reasoning_format: str, opened_by_prompt: bool) -> None:
        self._enabled = reasoning_format not in ("none", "deepseek-legacy")
        self._state = "inside" if (opened_by_prompt and self._enabled) else "start"
        self._buffer = ""

    def feed(self, text: str, final: bool = False) -> tuple[str, str]:
        if not self._enabled:
            return "", text
        self._buffer += text
        reasoning, content = "", ""
        while True:
            if self._state == "start":
                stripped = self._buffer.lstrip()
                if stripped.startswith(OPEN):
                    self._buffer = stripped[len(OPEN):]
                    self._state = "inside"
                    continue
                if not final and OPEN.startswith(stripped):
                    return reasoning, content  # maybe the start of <think>
                self._state = "content"
                continue
            if self._state == "inside":
                head, closed, rest = self._buffer.partition(CLOSE)
                if closed:
                    reasoning += head
                    self._buffer = rest.lstrip()
                    self._state = "content"
                    continue
                hold = 0 if final else partial_stop_length(self._buffer, (CLOSE,))
                reasoning += self._buffer[: len(self._buffer) - hold]
                self._buffer = self._buffer[len(self._buffer) - hold:]
                return reasoning, content
            content += self._buffer
            self._buffer = ""
            return reasoning, content
