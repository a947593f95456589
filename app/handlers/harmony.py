"""gpt-oss's harmony replies (a template with ``<|channel|>``, as llama-server picks its gpt-oss parser): the
model answers in messages, each ``<|channel|>NAME[ to=RECIPIENT][ <|constrain|>TYPE]<|message|>BODY``, ended by
``<|end|>`` (then ``<|start|>assistant`` and the next), ``<|call|>``, ``<|return|>`` or the end of the text. The
analysis channel is the reasoning, the final channel and a commentary without a recipient (a preamble) the
answer, a message to ``functions.NAME`` a tool call whose body is its JSON arguments.

Muse Glimmer's replies are messages of the same shape without channels (``MUSE``): `` to=self`` is the
reasoning, `` to=user`` (or no recipient) the answer, any other recipient a tool call whose body is its ATEM
block (``<atem:function_calls>``...), ended by ``<|eom|>`` or ``<|eot|>``.

Read into what the rest of the chat pipeline reads (``ReasoningStream``'s shapes): the reasoning, and the
content with each call written in the template's own call format (its ``CallFormat``: gpt-oss's learned from
the template, `` to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>``; Muse Glimmer's ATEM
block, declared, as it is), so that the tool gate and ``parse_tool_calls`` read the calls as any other format's.
With ``reasoning_format`` ``none`` the reasoning stays in the content with its markers, as llama-server leaves
it. (Their thinking tags, for a reasoning budget: ``declared_thinking_tags`` in app/templating/dedicated.py.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.templating.call_format import CallFormat
from app.templating.continuation import Continuation

MESSAGE = "<|message|>"
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


@dataclass(frozen=True)
class Dialect:
    """What differs between the two: how a message ends, how its header starts, which messages are thoughts
    and which calls, and whether a call's body is already in the template's call format."""

    ends: tuple[str, ...]  # <|start|> among them: the next message's header, kept for it
    header_starts: tuple[str, ...]
    thought_channel: str  # a channel, or for a dialect without channels, a recipient
    call_prefix: str | None  # a recipient that calls a function starts with it; None: any but self and user
    body_is_call: bool  # the body is the call as the template's format writes it
    markup: tuple[str, ...]  # the special tokens kept in the text (preserved)


HARMONY = Dialect(("<|end|>", "<|call|>", "<|return|>", "<|start|>"), ("<|start|>", "<|channel|>", " to=", "to="),
                  "analysis", "functions.", False, ("<|channel|>", "<|constrain|>", "<|message|>", "<|start|>",
                                                     "<|end|>"))
MUSE = Dialect(("<|eom|>", "<|eot|>", "<|start|>"), ("<|start|>", " to=", "to=", MESSAGE), "self", None, True,
               ("<|start|>", "<|message|>", "<|eom|>", "<|eot|>"))


class HarmonyStream:
    """The streaming reader: feed text pieces, get (reasoning, content) pieces. A message's header and a
    partial end marker are held until complete; a call's body until its message ends."""

    def __init__(self, reasoning_format: str, call_format: CallFormat | None, dialect: Dialect = HARMONY,
                 inside: Continuation | None = None) -> None:
        """``inside``: the prompt left the reply inside a message (a continued one): the answer's, or the
        thought's."""
        self._dialect = dialect
        self._extract = reasoning_format != "none"
        self._raw_analysis = reasoning_format in ("none", "deepseek-legacy")
        self._call_format = call_format
        self._buffer = ""
        self._state = "header"  # header: before a message's <|message|>; body: inside one; plain: no harmony
        self._kind = "content"  # the body's: reasoning, content or call
        self._analysis = False  # the body is the analysis channel's
        self._recipient = ""
        self._call = ""
        self.reasoned = False  # an analysis message was read as reasoning
        if inside is not None:
            self._state = "body"
            if inside is Continuation.REASONING:
                self._kind, self._analysis = ("reasoning" if self._extract else "content"), True
                self.reasoned = self._extract

    def feed(self, text: str, final: bool = False) -> tuple[str, str]:
        self._buffer += text
        reasoning: list[str] = []
        content: list[str] = []
        while self._step(reasoning, content, final):
            pass
        return "".join(reasoning), "".join(content)

    def _step(self, reasoning: list[str], content: list[str], final: bool) -> bool:
        """One move of the reader over its buffer; whether it can move again."""
        if self._state == "plain":
            content.append(self._buffer)
            self._buffer = ""
            return False
        if self._state == "header":
            return self._header(content, final)
        ends = [at for at in (self._buffer.find(end) for end in self._dialect.ends) if at >= 0]
        if ends:
            cut = min(ends)
            self._emit(self._buffer[:cut], reasoning, content)
            end = next(end for end in self._dialect.ends if self._buffer.startswith(end, cut))
            self._buffer = self._buffer[cut + (0 if end == "<|start|>" else len(end)):]
            self._close(content, end)
            return True
        hold = 0 if final else max((size for end in self._dialect.ends for size in range(len(end) - 1, 0, -1)
                                    if self._buffer.endswith(end[:size])), default=0)
        self._emit(self._buffer[:len(self._buffer) - hold], reasoning, content)
        self._buffer = self._buffer[len(self._buffer) - hold:]
        if final:
            self._close(content, "")
        return False

    def _header(self, content: list[str], final: bool) -> bool:
        head = self._buffer.lstrip()
        at = self._buffer.find(MESSAGE)
        starts = self._dialect.header_starts
        opens = any(head.startswith(start) for start in starts)
        if at < 0 and head and not final and (opens or any(start.startswith(head) for start in starts)):
            return False  # a header on its way
        if at < 0 and not head:
            return False
        if at < 0 or not opens:
            self._state = "plain"  # not in messages: the text as it is
            return True
        header = self._buffer[:at]
        channel = _CHANNEL.search(header)
        recipient = _RECIPIENT.search(header)
        self._recipient = recipient[1] if recipient else ""
        thought = (channel[1] if channel else "") if self._dialect.call_prefix else self._recipient
        if self._calls_a_function():
            self._kind, self._call = "call", ""
        elif thought == self._dialect.thought_channel:
            self._kind, self._analysis = ("reasoning" if self._extract else "content"), True
            self.reasoned = self.reasoned or self._extract
            if self._raw_analysis:  # kept in the content as the model wrote it, as llama-server keeps it
                content.append(header.replace("<|start|>assistant", "", 1).lstrip() + MESSAGE)
        else:
            self._kind = "content"
        self._buffer = self._buffer[at + len(MESSAGE):]
        self._state = "body"
        return True

    def _calls_a_function(self) -> bool:
        prefix = self._dialect.call_prefix
        if prefix is not None:
            return self._recipient.startswith(prefix)
        return self._recipient not in ("", "self", "user")

    def _emit(self, text: str, reasoning: list[str], content: list[str]) -> None:
        if not text:
            return
        if self._kind == "call":
            self._call += text
        elif self._kind == "reasoning":
            reasoning.append(text)
            if self._raw_analysis:
                content.append(text)
        else:
            content.append(text)

    def _close(self, content: list[str], end: str) -> None:
        """A message ended (``end``: its marker, empty at the end of the text)."""
        if self._kind == "call":
            content.append(self._call_text())
        elif self._analysis and self._raw_analysis:
            content.append(end if end != "<|start|>" else "")
        self._state, self._kind, self._analysis, self._recipient, self._call = "header", "content", False, "", ""

    def _call_text(self) -> str:
        """The call in the template's own format (what ``parse_tool_calls`` reads), or as written without one."""
        if self._dialect.body_is_call:
            return self._call.strip()
        name = self._recipient.removeprefix(self._dialect.call_prefix or "")
        if self._call_format is None:
            return f"to={self._recipient}{MESSAGE}{self._call}"
        return self._call_format.written(name, self._call.strip())
