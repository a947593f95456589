"""What a chat template can render, found by rendering probes through it (llama-server's
``chat_template_caps`` in /props): a marker in a probe message that shows up in the output means the
template renders that part. Computed once per template."""

from __future__ import annotations

import re
from collections.abc import Callable
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


_TWO_MARKERS = re.compile(r"^(<[^<>\s]+>|\[[^\[\]\s]+\])\s*(<[^<>\s]+>|\[[^\[\]\s]+\])$")
_TAIL = 64


def supports_thinking(template: Renders) -> bool:
    """Whether the template thinks, as llama.cpp's chat analysis finds it (llama-server's ``--reasoning auto``
    gives only such a template ``enable_thinking``): an answer's reasoning shows with a marker between it and
    the answer, or ``enable_thinking`` changes the end of the generation prompt (opens or closes a think
    block), or appends two markers to it."""
    thought = "probe_thought_marker"
    answer = {"role": "assistant", "content": "probe answer text"}
    try:
        shown = template.render([USER, {**answer, "reasoning_content": thought}], False, None,
                                {"enable_thinking": True})
        off = template.render([USER], True, None, {"enable_thinking": False})
        on = template.render([USER], True, None, {"enable_thinking": True})
    except InvalidRequestError:
        return False
    if thought in shown and not shown.split(thought, 1)[1].lstrip().startswith(str(answer["content"])):
        return True
    if off == on:
        return False
    head = common_prefix(off, on)
    off_rest, on_rest = off[head:], on[head:]
    if not off_rest[len(off_rest) - common_suffix(off_rest, on_rest):].strip():  # what differs ends the prompt
        return True
    return any(_appends_two_markers(base, extended) for base, extended in ((on, off), (off, on)))


def _appends_two_markers(base: str, extended: str) -> bool:
    anchor = base[-_TAIL:]
    at = extended.rfind(anchor)
    if at < 0 or at + len(anchor) >= len(extended):
        return False
    return _TWO_MARKERS.match(extended[at + len(anchor):].strip()) is not None
