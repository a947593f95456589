"""Tool-call formats, grammars and parsing; reasoning splits; schema rewrites."""

from __future__ import annotations

import json

import pytest

from app.engine.json_schema import tighten
from app.handlers.reasoning import ReasoningStream, split_reasoning
from app.handlers.tools import (
    NamedFunction,
    NamedToolChoice,
    ToolFormat,
    ToolSpec,
    call_grammar,
    detect_format,
    messages_for_template,
    parse_tool_calls,
    plan_tools,
)
from app.protocol.errors import InvalidRequestError
from tests.fakes import FakeVocabulary

TOOLS = [ToolSpec.model_validate({"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})]


def plan(template: str, choice: object = "auto", parallel: bool = False):  # type: ignore[no-untyped-def]
    result = plan_tools(TOOLS, choice, parallel, template)  # type: ignore[arg-type]
    assert result is not None
    return result


@pytest.mark.parametrize(
    ("template", "fmt"),
    [("{{ '<tool_call>' }}", ToolFormat.HERMES), ("[TOOL_CALLS]", ToolFormat.MISTRAL),
     ("<|python_tag|>", ToolFormat.LLAMA3), ("{{ messages }}", ToolFormat.GENERIC)],
)
def test_detect_format(template: str, fmt: ToolFormat) -> None:
    assert detect_format(template) is fmt


@pytest.mark.parametrize(
    ("template", "text", "content"),
    [
        ("<tool_call>", 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
         "Sure."),
        ("[TOOL_CALLS]", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}]', ""),
        ("<|python_tag|>", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}', ""),
        ("<|python_tag|>", '{"name": "get_weather", "parameters": {"city": "Oslo"}}', ""),
        ("plain", '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}', ""),
        ("plain", '{"tool_call": {"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}}', ""),
    ],
)
def test_parse_each_format(template: str, text: str, content: str) -> None:
    remaining, calls = parse_tool_calls(text, plan(template))
    assert remaining == content
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Oslo"})]
    assert calls[0].id.startswith("call_")


def test_text_that_is_no_call_stays_content() -> None:
    for text in ("Hello there", '{"name": "unknown_tool", "arguments": {}}', "<tool_call>not json</tool_call>"):
        remaining, calls = parse_tool_calls(text, plan("<tool_call>"))
        assert calls == [] and remaining == text


def test_tool_choice_rules() -> None:
    assert plan_tools(TOOLS, "none", False, "") is None
    assert plan_tools(None, "auto", False, "") is None
    assert plan("x", "required").forced == "required"
    named = NamedToolChoice(function=NamedFunction(name="get_weather"))
    assert plan("x", named).forced == "get_weather"
    with pytest.raises(InvalidRequestError, match="no tool named"):
        plan_tools(TOOLS, NamedToolChoice(function=NamedFunction(name="other")), False, "")
    with pytest.raises(InvalidRequestError, match="tools"):
        plan_tools(None, "required", False, "")


def test_call_grammars_wrap_the_format() -> None:
    vocab = FakeVocabulary()
    hermes = call_grammar(plan("<tool_call>", "required", parallel=True), vocab)
    assert hermes.startswith('root ::= tc ("\\n" tc)*') and '"<tool_call>"' in hermes and "call ::=" in hermes
    mistral = call_grammar(plan("[TOOL_CALLS]", "required"), vocab)
    assert mistral.startswith('root ::= "[TOOL_CALLS]" "[" call "]"')
    assert call_grammar(plan("plain", "required"), vocab) == 'root ::= "{}"'  # the schema route


def test_generic_templates_get_the_tools_in_a_system_message() -> None:
    messages = messages_for_template([{"role": "user", "content": "hi"}], plan("plain"), renders_tools=False)
    assert messages[0]["role"] == "system" and "get_weather" in messages[0]["content"]
    with_calls = messages_for_template(
        [{"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}],
        None, renders_tools=True)
    assert with_calls[0]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
    as_sent = messages_for_template([
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}],
        None, renders_tools=True, object_arguments=False)  # a template that takes the text (Functionary v3.2's)
    assert as_sent[0]["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"}'


def test_split_reasoning() -> None:
    assert split_reasoning("<think>hmm</think>\n\nAnswer", "auto", False).content == "Answer"
    assert split_reasoning("<think>hmm</think>Answer", "auto", False).reasoning == "hmm"
    assert split_reasoning("<think>hmm</think>Answer", "none", False).content == "<think>hmm</think>Answer"
    assert split_reasoning("hmm</think>Answer", "auto", True).reasoning == "hmm"
    assert split_reasoning("<think>hmm</think>A", "deepseek-legacy", False).content == "<think>hmm</think>A"
    assert split_reasoning("Plain", "auto", False).reasoning is None


def test_reasoning_stream_holds_partial_tags() -> None:
    stream = ReasoningStream("auto", False)
    pieces = ["<th", "ink>deep ", "thought</th", "ink>", "The answer", "."]
    got = [stream.feed(piece) for piece in pieces] + [stream.feed("", final=True)]
    assert "".join(r for r, _ in got) == "deep thought"
    assert "".join(c for _, c in got) == "The answer."
    plain = ReasoningStream("auto", False)
    assert plain.feed("<") == ("", "")
    assert plain.feed("b>bold") == ("", "<b>bold")


def test_tighten_spells_out_small_integer_ranges() -> None:
    schema = {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 1, "maximum": 3},
        "big": {"type": "integer", "minimum": 0, "maximum": 10**9},
        "list": {"type": "array", "items": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3}},
    }}
    out = tighten(schema)
    assert out["properties"]["n"] == {"enum": [1, 2, 3]}
    assert out["properties"]["big"] == schema["properties"]["big"]  # type: ignore[index]
    assert out["properties"]["list"]["items"] == {"enum": [1, 2]}
    assert schema["properties"]["n"]["type"] == "integer"  # type: ignore[index]


def test_forced_call_grammars_get_the_tightened_schema() -> None:
    seen: list[object] = []

    class Recording(FakeVocabulary):
        def json_schema_grammar(self, schema: object) -> str:
            seen.append(schema)
            return 'root ::= "{}"'

    tools = [ToolSpec.model_validate({"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 3}}}}})]
    forced = plan_tools(tools, "required", False, "plain")
    assert forced is not None
    call_grammar(forced, Recording())
    assert '"enum": [1, 2, 3]' in json.dumps(seen[-1])
