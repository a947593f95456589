"""Markup around an answer left out of a chat's content (``reply_wrappers`` in app/templating/dedicated.py:
Kimi K3's ``<|open|>response<|sep|>`` ... ``<|close|>response<|sep|>``), streamed: a piece that may be the start
of one is held until it is known."""

from __future__ import annotations

from app.engine.text import partial_stop_length


def unwrapped(text: str, wrappers: tuple[str, ...]) -> str:
    for wrapper in wrappers:
        text = text.replace(wrapper, "")
    return text


class WrapperFilter:
    def __init__(self, wrappers: tuple[str, ...]) -> None:
        self._wrappers = wrappers
        self._held = ""

    def feed(self, text: str, final: bool = False) -> str:
        if not self._wrappers:
            return text
        pending = unwrapped(self._held + text, self._wrappers)
        hold = 0 if final else partial_stop_length(pending, self._wrappers)
        self._held = pending[len(pending) - hold:]
        return pending[:len(pending) - hold]
