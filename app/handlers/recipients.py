"""Functionary v3.2's replies (its template has ``>>>all`` and ``>>>${recipient}``, as llama-server picks its
Functionary v3.2 parser): the prompt ends with ``>>>``, and the model writes messages, each a recipient on a
line of its own then the message, the next after another ``>>>``. ``all`` is the answer; any other recipient
is a tool call whose message is its JSON arguments.

Read into what the rest of the chat pipeline reads (``ReasoningStream``'s shapes: no reasoning here): the
answer, with each call written in the template's declared call format (``>>>NAME\\nARGS``:
app/templating/declared_formats.py), so that the tool gate and ``parse_tool_calls`` read it.
"""

from __future__ import annotations

import re

from app.templating.call_format import CallFormat

OPENER = ">>>"
_RECIPIENT = re.compile(r"[A-Za-z0-9_.\-]*")


class RecipientStream:
    """The streaming reader: feed text pieces, get ("", content) pieces. A recipient's line and a partial
    ``>>>`` are held until complete, a call's arguments until its message ends."""

    reasoned = False  # no message is a thought in this form

    def __init__(self, call_format: CallFormat | None, in_answer: bool = False) -> None:
        """``in_answer``: the prompt left the reply inside the answer's message (a continued one, after
        ``>>>all``)."""
        self._call_format = call_format
        self._buffer = ""
        self._state = "message" if in_answer else "recipient"  # recipient: its line; message: after it; plain
        self._recipient = "all" if in_answer else ""
        self._call = ""
        self._opened = False  # the message was opened by a >>> in the text (the first one's is the prompt's)

    def feed(self, text: str, final: bool = False) -> tuple[str, str]:
        self._buffer += text
        content: list[str] = []
        while self._step(content, final):
            pass
        return "", "".join(content)

    def _step(self, content: list[str], final: bool) -> bool:
        if self._state == "plain":
            content.append(self._buffer)
            self._buffer = ""
            return False
        if self._state == "recipient":
            return self._recipient_line(final)
        at = self._buffer.find(OPENER)
        if at >= 0:
            self._emit(self._buffer[:at], content)
            self._buffer = self._buffer[at + len(OPENER):]
            self._close(content)
            return True
        hold = 0 if final else max((size for size in (2, 1) if self._buffer.endswith(OPENER[:size])), default=0)
        self._emit(self._buffer[:len(self._buffer) - hold], content)
        self._buffer = self._buffer[len(self._buffer) - hold:]
        if final:
            self._close(content)
        return False

    def _recipient_line(self, final: bool) -> bool:
        line, newline, rest = self._buffer.lstrip(">").partition("\n")
        name = _RECIPIENT.fullmatch(line.strip())
        if not newline:
            if name is None or final:  # not a recipient's line: the text as it is
                self._state = "plain"
                return True
            return False
        if name is None or not line.strip():
            self._state = "plain"
            return True
        self._recipient, self._call, self._buffer, self._state = line.strip(), "", rest, "message"
        return True

    def _emit(self, text: str, content: list[str]) -> None:
        if self._recipient == "all":
            content.append(text)
        else:
            self._call += text

    def _close(self, content: list[str]) -> None:
        if self._recipient != "all":
            if self._call.lstrip().startswith("{"):
                content.append(self._call_text())
            else:  # not arguments: a line of the answer that only looked like a recipient, as written
                content.append((OPENER if self._opened else "") + self._recipient + "\n" + self._call)
        self._state, self._recipient, self._call, self._opened = "recipient", "", "", True

    def _call_text(self) -> str:
        if self._call_format is None:
            return f"{OPENER}{self._recipient}\n{self._call}"
        return self._call_format.written(self._recipient, self._call.strip())
