"""What a chat template can render, found by rendering probes through it (llama-server's
``chat_template_caps`` in /props): a marker in a probe message that shows up in the output means the
template renders that part. Computed once per template."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.protocol.errors import InvalidRequestError


class Renders(Protocol):
    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               tools: list[dict[str, Any]] | None = None, extra: dict[str, Any] | None = None) -> str: ...


def _call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": f"id_{name}", "type": "function", "function": {"name": name, "arguments": arguments}}


TOOL = {"type": "function", "function": {"name": "probe_tool_marker", "description": "probe",
                                         "parameters": {"type": "object", "properties": {}}}}
USER = {"role": "user", "content": "hello"}
THOUGHT = "probe_thought_marker"


def template_caps(template: Renders) -> dict[str, bool]:
    """llama-server's capability names, each true when the template renders that probe."""
    def shows(marker: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
              extra: dict[str, Any] | None = None) -> bool:
        try:
            return marker in template.render(messages, True, tools, extra)
        except InvalidRequestError:
            return False

    def differs(render: Callable[[dict[str, Any]], str]) -> bool:
        try:
            return render({"reasoning_effort": "low"}) != render({"reasoning_effort": "high"})
        except InvalidRequestError:
            return False

    calls = [_call("probe_call_one", "{}"), _call("probe_call_two", "{}")]
    answered = {"role": "assistant", "content": "", "tool_calls": calls}
    return {
        "supports_string_content": shows("probe_string_marker", [{"role": "user", "content": "probe_string_marker"}]),
        "supports_typed_content": shows("probe_typed_marker", [{"role": "user", "content": [
            {"type": "text", "text": "probe_typed_marker"}]}]),
        "supports_tools": shows("probe_tool_marker", [USER], [TOOL]),
        "supports_tool_calls": shows("probe_call_one", [USER, answered]),
        "supports_parallel_tool_calls": shows("probe_call_two", [USER, answered]),
        "supports_system_role": shows("probe_system_marker", [{"role": "system", "content": "probe_system_marker"},
                                                              USER]),
        "supports_preserve_reasoning": shows("probe_reasoning_marker", [
            USER, {"role": "assistant", "content": "ok", "reasoning_content": "probe_reasoning_marker"}, USER]),
        "supports_reasoning_effort": differs(lambda extra: template.render([USER], True, None, extra)),
        "supports_object_arguments": shows("probe_argument_key", [USER, {
            "role": "assistant", "content": "", "tool_calls": [_call("probe_call_one", {"probe_argument_key": 1})]}]),
    }


def common_prefix(left: str, right: str) -> int:
    """How many characters two renderings share from their start."""
    size = 0
    while size < min(len(left), len(right)) and left[size] == right[size]:
        size += 1
    return size


def common_suffix(left: str, right: str) -> int:
    """How many characters two renderings share at their end."""
    return common_prefix(left[::-1], right[::-1])


_MARKER = r"<[^<>\s]+>|\[[^\[\]\s]+\]"  # a tag: <...> or [...], no blanks inside
_TWO_MARKERS = re.compile(rf"^({_MARKER})\s*({_MARKER})$")
_TAIL = 64


_ANSWER = "probe answer text"


def _thinking_probes(template: Renders) -> tuple[str, str, str] | None:
    """What llama.cpp's analysis of thinking renders: an answer after a thought (thinking on), and the
    generation prompt with thinking off and on; None where the template refuses them."""
    try:
        shown = template.render([USER, {"role": "assistant", "content": _ANSWER, "reasoning_content": THOUGHT}],
                                False, None, {"enable_thinking": True})
        off = template.render([USER], True, None, {"enable_thinking": False})
        on = template.render([USER], True, None, {"enable_thinking": True})
    except InvalidRequestError:
        return None
    return shown, off, on


@dataclass(frozen=True)
class Thinking:
    """What llama.cpp's analysis of thinking finds in a template, from one rendering of its probes: whether it
    thinks (``--reasoning auto`` gives only such a template ``enable_thinking``) and the tags around a thought
    that it shows (None: none; the server then takes ``THINK``)."""

    thinks: bool
    tags: ThinkingTags | None


def analyse_thinking(template: Renders) -> Thinking:
    """The template's ``Thinking``; neither where it refuses the probes."""
    probes = _thinking_probes(template)
    if probes is None:
        return Thinking(False, None)
    return Thinking(_thinks(*probes), _found_tags(*probes))


def _thinks(shown: str, off: str, on: str) -> bool:
    """An answer's reasoning shows with a marker between it and the answer, or ``enable_thinking`` changes the
    end of the generation prompt (opens or closes a think block), or appends two markers to it."""
    if THOUGHT in shown and not shown.split(THOUGHT, 1)[1].lstrip().startswith(_ANSWER):
        return True
    if off == on:
        return False
    head = common_prefix(off, on)
    off_rest, on_rest = off[head:], on[head:]
    if not off_rest[len(off_rest) - common_suffix(off_rest, on_rest):].strip():  # what differs ends the prompt
        return True
    return any(_two_markers_appended(base, extended) is not None for base, extended in ((on, off), (off, on)))


def _two_markers_appended(base: str, extended: str) -> re.Match[str] | None:
    """The two markers (groups 1 and 2) ``extended`` adds after the end of ``base``, if that is what it adds."""
    anchor = base[-_TAIL:]
    at = extended.rfind(anchor)
    if at < 0 or at + len(anchor) >= len(extended):
        return None
    return _TWO_MARKERS.match(extended[at + len(anchor):].strip())


@dataclass(frozen=True)
class ThinkingTags:
    """What opens and what closes a thought; ``written_open`` and ``written_close``: the same as the template
    writes them around a thought in an answer, with their blanks (llama.cpp's reasoning start and end: Qwen3's
    ``<think>\n`` and ``\n</think>\n\n``), where they differ from the bare tags."""

    open: str = "<think>"
    close: str = "</think>"
    written_open: str = ""
    written_close: str = ""
    empty_thought_unopened: bool = False  # a thought without reasoning written as its closing tag alone

    @property
    def start(self) -> str:
        """What opens a thought in a prompt (a continued message's)."""
        return self.written_open or self.open

    @property
    def end(self) -> str:
        """What closes a thought in a prompt, up to the answer."""
        return self.written_close or self.close


THINK = ThinkingTags()  # llama.cpp's default: <think> and </think>
_AROUND_THOUGHT = re.compile(rf"({_MARKER})(\s*){THOUGHT}(\s*)({_MARKER})(\s*)")


def _found_tags(shown: str, off: str, on: str) -> ThinkingTags | None:
    """The tags around a thought, as llama.cpp's analysis finds them: the markers around an answer's reasoning
    in its rendering (Seed-OSS's ``<seed:think>``, MiniMax M3's ``<mm:think>``), with the blanks written around
    it, else the two markers that ``enable_thinking`` adds to the prompt's end (Command R7B's empty
    ``<|START_THINKING|><|END_THINKING|>``), else the one it closes the prompt with (``_closed_when_off``); None
    where the template shows none of these (or no pair of tags: ``_pair``)."""
    around = _AROUND_THOUGHT.search(shown)
    if around is not None and _pair(around[1], around[4]):  # with the blanks written around the thought
        return ThinkingTags(around[1], around[4], around[1] + around[2], around[3] + around[4] + around[5])
    found = [_two_markers_appended(base, extended) for base, extended in ((on, off), (off, on))]
    pair = next(((tags[1], tags[2]) for tags in found if tags is not None and _pair(tags[1], tags[2])),
                _closed_when_off(on, off))
    return ThinkingTags(*pair) if pair is not None else None


_LAST_MARKER = re.compile(rf"({_MARKER})\s*$")


def _closed_when_off(on: str, off: str) -> tuple[str, str] | None:
    """The tags of a prompt that opens a thought when thinking is on and closes it right away when off
    (DeepSeek V3.1's ``<think>``, and ``<think></think>``): the marker ending one, the one the other adds."""
    if not off.startswith(on):
        return None
    added, opened = re.fullmatch(rf"\s*({_MARKER})\s*", off[len(on):]), _LAST_MARKER.search(on)
    if added is None or opened is None or not _pair(opened[1], added[1]):
        return None
    return opened[1], added[1]


def _pair(opening: str, closing: str) -> bool:
    """Whether two markers open and close the same thing: one name, the closing one marked as such
    (``</think>``, ``<|END_THINKING|>``); Kimi K3's ``<|sep|>`` and ``<|close|>`` around a thought are no pair."""
    def name(marker: str) -> str:
        return re.sub(r"^(start|begin|end)", "", re.sub(r"[^a-z]", "", marker.lower()))

    return opening != closing and bool(name(opening)) and name(opening) == name(closing)
