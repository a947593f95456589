"""Reasoning text: ``<think>...</think>`` (or the template's own tags: ``analyse_thinking`` in
app/templating/template_caps.py) split out of the content into ``reasoning_content``.

``reasoning_format`` follows llama-server: ``none`` leaves the text as generated; ``auto`` and
``deepseek`` split the thinking out; ``deepseek-legacy`` splits it out and also keeps it in the
content. When the prompt itself ends with the opening tag (a template that opens the thinking for the
model), the generated text starts inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.text import partial_stop_length
from app.templating.template_caps import THINK, ThinkingTags

FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")


@dataclass(frozen=True)
class Split:
    content: str
    reasoning: str | None


def split_reasoning(text: str, reasoning_format: str, opened_by_prompt: bool,
                    tags: ThinkingTags = THINK) -> Split:
    if reasoning_format == "none":
        return Split(text, None)
    stripped = text.lstrip()
    if stripped.startswith(tags.open):
        inner = stripped[len(tags.open):]
    elif opened_by_prompt:
        inner = text
    else:
        return Split(text, None)
    thinking, closed, rest = inner.partition(tags.close)
    content = rest.lstrip() if closed else ""
    if reasoning_format == "deepseek-legacy":
        content = text
    return Split(content, thinking.strip())


class ReasoningStream:
    """The streaming form of ``split_reasoning``: feed text pieces, get (reasoning, content) pieces.
    A partial opening or closing tag is held back until it is complete."""

    def __init__(self, reasoning_format: str, opened_by_prompt: bool, tags: ThinkingTags = THINK) -> None:
        self._open, self._close = tags.open, tags.close
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
                if stripped.startswith(self._open):
                    self._buffer = stripped[len(self._open):]
                    self._state = "inside"
                    continue
                if not final and self._open.startswith(stripped):
                    return reasoning, content  # maybe the start of <think>
                self._state = "content"
                continue
            if self._state == "inside":
                head, closed, rest = self._buffer.partition(self._close)
                if closed:
                    reasoning += head
                    self._buffer = rest.lstrip()
                    self._state = "content"
                    continue
                hold = 0 if final else partial_stop_length(self._buffer, (self._close,))
                reasoning += self._buffer[: len(self._buffer) - hold]
                self._buffer = self._buffer[len(self._buffer) - hold:]
                return reasoning, content
            content += self._buffer
            self._buffer = ""
            return reasoning, content
