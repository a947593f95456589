"""Functionary v3.2's replies (app/handlers/recipients.py): after the prompt's ``>>>``, a recipient's line then
its message; ``all`` is the answer, any other recipient a tool call, written in the template's declared call
format so that the calls are read as any learned format's; streamed in pieces as read whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.handlers.recipients import RecipientStream
from app.handlers.replies import reply_form, split_reply
from app.handlers.tools import ToolSpec, parse_tool_calls, plan_tools
from app.templating.declared_formats import FUNCTIONARY_V3_2
from app.templating.template_caps import THINK

SOURCE = (Path(__file__).resolve().parents[1] / "data" / "templates" / "meetkai-functionary-medium-v3.2.jinja"
          ).read_text()
WEATHER = ToolSpec.model_validate({"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}})
REPLIES = {  # what the model writes after the prompt's >>>: (the content, the calls)
    "all\nIt is sunny.\nEnjoy.": ("It is sunny.\nEnjoy.", []),
    'get_weather\n{"city": "Paris"}': ("", [("get_weather", '{"city": "Paris"}')]),
    'all\nLet me check.>>>get_weather\n{"city": "Paris"}>>>get_weather\n{"city": "Oslo"}': (
        "Let me check.", [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Oslo"}')]),
    "Just an answer, not in the form.": ("Just an answer, not in the form.", []),
    "Paris\nis the capital.": ("Paris\nis the capital.", []),  # a first line like a recipient, not a call
}


def read(reply: str) -> tuple[str, list[tuple[str, str]]]:
    plan = plan_tools([WEATHER], "auto", True, SOURCE, FUNCTIONARY_V3_2)
    assert plan is not None
    split = split_reply("recipients", reply, "auto", False, THINK, FUNCTIONARY_V3_2)
    assert split.reasoning is None
    content, calls = parse_tool_calls(split.content, plan)
    return content, [(call.name, call.arguments) for call in calls]


@pytest.mark.parametrize("reply", sorted(REPLIES))
def test_the_answer_and_the_calls_are_read(reply: str) -> None:
    assert reply_form(SOURCE) == "recipients"
    assert read(reply) == REPLIES[reply]


@pytest.mark.parametrize("reply", sorted(REPLIES))
@pytest.mark.parametrize("size", [1, 2, 5])
def test_streamed_in_pieces_as_read_whole(reply: str, size: int) -> None:
    stream = RecipientStream(FUNCTIONARY_V3_2)
    pieces = [stream.feed(reply[at:at + size])[1] for at in range(0, len(reply), size)]
    pieces.append(stream.feed("", final=True)[1])
    assert "".join(pieces) == split_reply("recipients", reply, "auto", False, THINK, FUNCTIONARY_V3_2).content
