"""gpt-oss's harmony replies (app/handlers/harmony.py): the analysis channel is the reasoning, the final channel
the answer, a message to functions.NAME a tool call in the template's own call format (so that it is read as
any learned format's), streamed in pieces as read whole. And the messages of the templates llama-server gives
code of its own, shaped as it shapes them (app/templating/dedicated.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.handlers.harmony import MUSE, HarmonyStream
from app.handlers.reasoning import Split
from app.handlers.replies import reply_form, split_reply
from app.handlers.tools import ToolFormat, ToolSpec, parse_tool_calls, plan_tools
from app.handlers.wrappers import WrapperFilter, unwrapped
from app.templating.call_format import CallFormat
from app.templating.call_learning import learn_call_format
from app.templating.chat_template import ChatTemplate, TemplateChoice
from app.templating.declared_formats import MUSE_GLIMMER, declared_call_format
from app.templating.dedicated import declared_thinking_tags, message_shaper, reply_wrappers
from app.templating.template_caps import THINK, ThinkingTags

SOURCE = (Path(__file__).resolve().parents[1] / "data" / "templates" / "openai-gpt-oss-120b.jinja").read_text()
MUSE_SOURCE = (Path(__file__).resolve().parents[1] / "data" / "templates" / "muse-glimmer.jinja").read_text()
LEARNED = learn_call_format(ChatTemplate(TemplateChoice(SOURCE, None), "<s>", "</s>", lambda *_: ""))
ANSWER = ("<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant<|channel|>final"
          "<|message|>It is sunny.")
CALL_IN_CHANNEL = ("<|channel|>analysis<|message|>I need the tool.<|end|><|start|>assistant<|channel|>commentary "
                   'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}')
CALL_IN_ROLE = ('<|channel|>analysis<|message|>I need the tool.<|end|><|start|>assistant to=functions.get_weather'
                '<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>')
WEATHER = ToolSpec.model_validate({"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}})


def split_harmony(text: str, reasoning_format: str, call_format: CallFormat) -> Split:
    return split_reply("harmony", text, reasoning_format, False, THINK, call_format)


def learned() -> CallFormat:
    assert LEARNED is not None
    return LEARNED


def test_the_analysis_is_the_reasoning_and_the_final_channel_the_answer() -> None:
    split = split_harmony(ANSWER, "auto", learned())
    assert (split.reasoning, split.content) == ("The user wants the weather.", "It is sunny.")
    assert split_harmony("Just text.", "auto", learned()) == split_harmony("Just text.", "none", learned())
    assert split_harmony("Just text.", "auto", learned()).content == "Just text."
    assert split_harmony("Just text.", "auto", learned()).reasoning is None


def test_reasoning_format_none_keeps_the_analysis_in_the_content_as_llama_server() -> None:
    split = split_harmony(ANSWER, "none", learned())
    assert split.reasoning is None
    assert split.content == "<|channel|>analysis<|message|>The user wants the weather.<|end|>It is sunny."
    legacy = split_harmony(ANSWER, "deepseek-legacy", learned())
    assert legacy.reasoning == "The user wants the weather." and legacy.content == split.content


@pytest.mark.parametrize("reply", [CALL_IN_CHANNEL, CALL_IN_ROLE])
def test_a_message_to_a_function_is_a_tool_call(reply: str) -> None:
    split = split_harmony(reply, "auto", learned())
    assert split.reasoning == "I need the tool."
    plan = plan_tools([WEATHER], "auto", False, SOURCE, learned())
    assert plan is not None and plan.format is ToolFormat.LEARNED
    content, calls = parse_tool_calls(split.content, plan)
    assert content == "" and [(call.name, call.arguments) for call in calls] == [("get_weather", '{"city": "Paris"}')]


@pytest.mark.parametrize("reply", [ANSWER, CALL_IN_CHANNEL, CALL_IN_ROLE, "to be honest, it rains.",
                                   "Not a header <|message|> at all."])
@pytest.mark.parametrize("size", [1, 3, 7])
def test_streamed_in_pieces_as_read_whole(reply: str, size: int) -> None:
    stream = HarmonyStream("auto", learned())
    pieces = [stream.feed(reply[at:at + size]) for at in range(0, len(reply), size)]
    pieces.append(stream.feed("", final=True))
    whole = split_harmony(reply, "auto", learned())
    assert "".join(reasoning for reasoning, _ in pieces).strip() == (whole.reasoning or "")
    assert "".join(content for _, content in pieces) == whole.content
    assert "<|" not in "".join(reasoning for reasoning, _ in pieces)  # no marker leaks into the reasoning


def test_a_preamble_is_part_of_the_answer() -> None:
    reply = ("<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>final<|message|>"
             "Sunny.")
    assert split_harmony(reply, "auto", learned()).content == "Let me check.Sunny."


THOUGHT = [{"role": "user", "content": "Hi"},
           {"role": "assistant", "content": "Hello.", "reasoning_content": "A greeting."},
           {"role": "user", "content": "Name a colour."}]


@pytest.mark.parametrize(("name", "shown"), [
    ("openai-gpt-oss-120b", "<|channel|>analysis<|message|>A greeting.<|end|>"),  # its template reads `thinking`
    ("LFM2.5-8B-A1B", "<think>A greeting.</think>Hello."),  # the same
    ("mistralai-Ministral-3-14B-Reasoning-2512", "[THINK]A greeting.[/THINK]Hello."),  # a thinking block first
])
def test_a_historys_reasoning_reaches_the_template_as_llama_server_shapes_it(name: str, shown: str) -> None:
    source = (Path(__file__).resolve().parents[1] / "data" / "templates" / f"{name}.jinja").read_text()
    template = ChatTemplate(TemplateChoice(source, None), "<s>", "</s>", lambda *_: "")
    last_turn = THOUGHT[:2]  # gpt-oss and LFM2.5 show a thought only in the last turn (unless preserved)
    assert shown in template.render(THOUGHT if "Ministral" in name else last_turn, False)


def test_only_the_templates_llama_server_shapes_for_are_shaped() -> None:
    assert message_shaper("{{ messages }}") is None
    shape = message_shaper("[SYSTEM_PROMPT][TOOL_CALLS][ARGS]")
    assert shape is not None
    assert shape([{"role": "user", "content": "hi"}]) == [{"role": "user", "content": "hi"}]  # users are not
    assert shape([{"role": "system", "content": "be brief"}]) == [{"role": "system", "content": [
        {"type": "text", "text": "be brief"}]}]


def test_the_thinking_tags_llama_server_declares_for_gpt_oss_and_gemma_4() -> None:
    templates = Path(__file__).resolve().parents[1] / "data" / "templates"
    gemma = (templates / "google-gemma-4-31B-it.jinja").read_text()
    assert declared_thinking_tags(SOURCE) == ThinkingTags("<|channel|>analysis<|message|>", "<|end|>",
                                                          "", "<|end|><|start|>assistant<|channel|>final<|message|>")
    assert declared_thinking_tags(gemma) == ThinkingTags("<|channel>thought", "<channel|>",
                                                         written_open="<|channel>thought\n")
    assert declared_thinking_tags((templates / "Qwen3-Coder.jinja").read_text()) is None  # found, not declared


def test_muse_glimmers_recipients_are_read_as_gpt_oss_channels_are() -> None:
    """to=self is the reasoning, to=user the answer, a message to a tool its ATEM call (kept as written: the
    declared format reads it)."""
    atem = ('<atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris'
            "</atem:parameter>\n</atem:invoke>\n</atem:function_calls>")
    answer = " to=self<|message|>Think.<|eom|><|start|>assistant to=user<|message|>Sunny.<|eot|>"
    call = f" to=self<|message|>Think.<|eom|><|start|>assistant to=get_weather<|message|>{atem}<|eom|>"
    for reply, content in ((answer, "Sunny."), (call, atem)):
        split = split_reply("muse", reply, "auto", False, THINK, MUSE_GLIMMER)
        assert (split.reasoning, split.content) == ("Think.", content)
        stream = HarmonyStream("auto", MUSE_GLIMMER, MUSE)
        pieces = [stream.feed(reply[at:at + 3]) for at in range(0, len(reply), 3)] + [stream.feed("", final=True)]
        assert "".join(piece for _, piece in pieces) == content
    assert reply_form(MUSE_SOURCE) == "muse" and declared_call_format(MUSE_SOURCE) is MUSE_GLIMMER


def test_text_that_is_not_in_messages_is_the_answer_as_written() -> None:
    for text in ("Not a header <|message|> at all.", "to be honest, it rains."):
        assert split_harmony(text, "auto", learned()) == Split(text, None)


def test_kimi_k3s_thought_and_response_tags_are_left_out_of_the_answer() -> None:
    """Kimi K3's prompt opens a think tag; the answer after it is wrapped in response and message tags, which
    llama-server's parser reads past; streamed in pieces as read whole."""
    source = (Path(__file__).resolve().parents[1] / "data" / "templates" / "Kimi-K3.jinja").read_text()
    tags, wrappers = declared_thinking_tags(source), reply_wrappers(source)
    assert tags is not None and (tags.open, tags.close) == ("<|open|>think<|sep|>", "<|close|>think<|sep|>")
    reply = ("Rain is likely.<|close|>think<|sep|><|open|>response<|sep|>Take an umbrella.<|close|>response<|sep|>"
             "<|close|>message<|sep|>")
    split = split_reply("tags", reply, "auto", True, tags, None)
    assert (split.reasoning, unwrapped(split.content, wrappers)) == ("Rain is likely.", "Take an umbrella.")
    stream = WrapperFilter(wrappers)
    pieces = [stream.feed(split.content[at:at + 5]) for at in range(0, len(split.content), 5)]
    assert "".join(pieces) + stream.feed("", final=True) == "Take an umbrella."
    assert reply_wrappers(SOURCE) == ()  # gpt-oss's answer has none
