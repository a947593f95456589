"""Streaming a chat that may call tools: text that may be (the start of) a call is held back, the rest streams.

A reply that starts with a call marker is held whole (it is parsed when it ends); a reply that starts as an
answer streams, until a distinctive marker (``<tool_call>``, ``[TOOL_CALLS]``, a learned format's opening:
not a bare ``{``) shows up in it: the text before the marker has streamed, the call is held."""

from __future__ import annotations

from app.handlers.tools import ToolPlan, call_markers


class ToolGate:
    def __init__(self, plan: ToolPlan | None) -> None:
        self._markers = call_markers(plan) if plan else ()
        self._inside = tuple(marker for marker in self._markers if marker != "{")  # markers after an answer's text
        self._state = "streaming" if plan is None else ("buffering" if plan.forced else "undecided")
        self._held = ""
        self.streamed = False  # some of the reply went out as text before it was held

    @property
    def buffering(self) -> bool:
        return self._state == "buffering"

    @property
    def held(self) -> str:
        return self._held

    def feed(self, text: str) -> str:
        if self._state == "streaming":
            return self._stream(text)
        self._held += text
        if self._state == "buffering":
            return ""
        head = self._held.lstrip()
        if not head:
            return ""
        if any(head.startswith(marker) for marker in self._markers):
            self._state = "buffering"
            return ""
        if any(marker.startswith(head) for marker in self._markers):
            return ""
        self._state = "streaming"
        held, self._held = self._held, ""
        return self._stream(held)

    def _stream(self, text: str) -> str:
        """The text up to a marker (the rest held from it on), or up to what may be a marker's start."""
        pending = self._held + text
        found = [at for at in (pending.find(marker) for marker in self._inside) if at >= 0]
        if found:
            cut = min(found)
            self._state = "buffering"
        else:
            cut = len(pending) - max((size for marker in self._inside for size in range(len(marker) - 1, 0, -1)
                                      if pending.endswith(marker[:size])), default=0)
        released, self._held = pending[:cut], pending[cut:]
        self.streamed = self.streamed or bool(released)
        return released

    def release(self) -> str:
        released, self._held = ("" if self._state == "buffering" else self._held), ""
        return released
