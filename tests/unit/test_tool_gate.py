"""Streaming a chat that may call tools (app/handlers/tool_gate.py): an answer streams up to a call's marker,
what may be a marker's start waits for the next piece, a reply that opens with a call is held whole."""

from __future__ import annotations

import json

from app.handlers.tool_gate import ToolGate
from app.handlers.tools import ToolSpec, plan_tools
from tests.inprocess import make_application

TOOLS = [ToolSpec.model_validate({"type": "function", "function": {"name": "get_weather"}})]
HERMES = plan_tools(TOOLS, "auto", False, "{{ '<tool_call>' }}")
GENERIC = plan_tools(TOOLS, "auto", False, "{{ messages }}")


def fed(gate: ToolGate, *pieces: str) -> list[str]:
    return [gate.feed(piece) for piece in pieces]


def test_an_answer_streams_up_to_a_calls_marker_and_the_call_is_held() -> None:
    gate = ToolGate(HERMES)
    assert fed(gate, "Let me ", "check.<tool", '_call>\n{"name": "get_weather"}') == ["Let me ", "check.", ""]
    assert gate.buffering and gate.streamed
    assert gate.held == '<tool_call>\n{"name": "get_weather"}'
    assert gate.release() == ""


def test_what_only_looked_like_a_markers_start_goes_out_with_the_next_piece() -> None:
    gate = ToolGate(HERMES)
    assert fed(gate, "Sure, a <", "b and c", " done") == ["Sure, a ", "<b and c", " done"]
    assert not gate.buffering
    assert gate.feed("<t") == "" and gate.release() == "<t"  # the end of the reply lets a partial marker go


def test_a_reply_that_opens_with_a_call_is_held_whole() -> None:
    gate = ToolGate(HERMES)
    assert fed(gate, "  <tool_", 'call>{"name": "get_weather"}') == ["", ""]
    assert gate.buffering and not gate.streamed


def test_a_bare_brace_inside_an_answer_is_not_a_call() -> None:
    gate = ToolGate(GENERIC)
    assert fed(gate, "Use ", "a dict like {} here") == ["Use ", "a dict like {} here"]
    assert not gate.buffering


def test_without_tools_everything_streams() -> None:
    gate = ToolGate(None)
    assert fed(gate, "<tool_call>", "x") == ["<tool_call>", "x"]


def test_a_streamed_answer_then_a_call_arrives_as_text_then_the_call() -> None:
    """Through the chat route: the answer's text streams once, the call's markup never does."""
    reply = 'Let me check.[TOOL_CALLS][{"name": "get_weather", "arguments": {}}]'  # the fake model writes no ">"
    template = "{% if tools %}[tools]{% endif %}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    application = make_application("--jinja", "--chat-template", template + "{# [TOOL_CALLS] #}<assistant>",
                                   reply=reply)
    try:
        answer = application.flask.test_client().post("/v1/chat/completions", data=json.dumps({
            "messages": [{"role": "user", "content": "Weather?"}], "stream": True, "max_tokens": 200,
            "tools": [TOOLS[0].model_dump()]}), content_type="application/json")
        chunks = [json.loads(line[6:]) for line in answer.get_data(as_text=True).splitlines()
                  if line.startswith("data: {")]
        deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
        assert "".join(delta.get("content") or "" for delta in deltas) == "Let me check."
        calls = [call for delta in deltas for call in delta.get("tool_calls") or []]
        assert [call["function"]["name"] for call in calls] == ["get_weather"]
        assert [chunk["choices"][0]["finish_reason"] for chunk in chunks if chunk["choices"]][-1] == "tool_calls"
    finally:
        application.shutdown()


def test_a_learned_formats_marker_stops_at_a_blank_or_a_call_id() -> None:
    """The model's blanks and call ids differ from the template's: the marker an answer is watched for is
    the opening up to the first of them."""
    from app.templating.call_format import CALL_IDS, CallFormat

    qwen3_coder = CallFormat("tagged", "", "<tool_call>\n<function=", "", "", "", "\n")
    solar = CallFormat("json", "<|tool_calls|>", f"<|tool_call:begin|>{CALL_IDS[0]}<|tool_call:name|>", "", "", "",
                       None)
    assert (qwen3_coder.marker, solar.marker) == ("<tool_call>", "<|tool_calls|><|tool_call:begin|>")
