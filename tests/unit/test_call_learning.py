"""Tool-call formats learned from real models' chat templates (tests/data/templates, from the pinned llama.cpp):
each template's format is learned (or declared, where it cannot be), and a reply written the way that model
writes calls is read back into the calls, typed by the tools' schemas; the template renders the tools itself;
a forced call's grammar spells the template's format. Also the template's thinking tags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.handlers.reasoning import ReasoningStream, split_reasoning
from app.handlers.tools import (
    NamedFunction,
    NamedToolChoice,
    ToolFormat,
    ToolSpec,
    call_grammar,
    parse_tool_calls,
    plan_tools,
)
from app.protocol.errors import InvalidRequestError
from app.templating.call_format import CallFormat
from app.templating.call_learning import learn_call_format
from app.templating.chat_template import ChatTemplate, TemplateChoice
from app.templating.declared_formats import declared_call_format
from app.templating.template_caps import THINK, ThinkingTags, analyse_thinking
from tests.fakes import FakeVocabulary

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
TOOLS = [ToolSpec.model_validate({"type": "function", "function": {
    "name": name, "description": f"the {name} tool", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}}}}) for name in ("get_weather", "get_time")]
WEATHER = ("get_weather", {"city": "Paris", "days": 3})
TIME = ("get_time", {"city": "Oslo", "days": 1})

def _ds(marker: str) -> str:
    """A DeepSeek special token: fullwidth bars, words joined by U+2581."""
    return "<\uff5c" + marker.replace(" ", "\u2581") + "\uff5c>"


def _dsml_calls(*calls: tuple[str, dict[str, Any]]) -> str:
    """Calls as DeepSeek V4 writes them: tags named with its fullwidth-bar DSML token, a string parameter
    string="true", a number string="false"."""
    def tag(name: str, closing: bool = False) -> str:
        return ("</" if closing else "<") + "\uff5cDSML\uff5c" + name + ">"

    invokes = "".join(
        tag(f'invoke name="{name}"') + "\n" + "".join(
            tag(f'parameter name="{key}" string="{str(isinstance(value, str)).lower()}"') + str(value)
            + tag("parameter", True) + "\n" for key, value in arguments.items()) + tag("invoke", True) + "\n"
        for name, arguments in calls)
    return tag("tool_calls") + "\n" + invokes + tag("tool_calls", True)


REPLIES = {  # a reply as each model writes its calls, one call and two
    "Qwen3-Coder": ("tagged", "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                    "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
                    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
                    "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=city>\nOslo"
                    "\n</parameter>\n<parameter=days>\n1\n</parameter>\n</function>\n</tool_call>"),
    "GLM-4.6": ("tagged", "Let me check.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>"
                "\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
                "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>"
                "\n<arg_value>3</arg_value>\n</tool_call>\n<tool_call>get_time\n<arg_key>city</arg_key>\n<arg_value>"
                "Oslo</arg_value>\n<arg_key>days</arg_key>\n<arg_value>1</arg_value>\n</tool_call>"),
    "Kimi-K2-Thinking": ("json", "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                         '<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|>'
                         "<|tool_calls_section_end|>",
                         "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_"
                         'begin|>{"city": "Paris", "days": 3}<|tool_call_end|><|tool_call_begin|>functions.get_time:1'
                         '<|tool_call_argument_begin|>{"city":"Oslo","days":1}<|tool_call_end|><|tool_calls_section_'
                         "end|>"),
    "Mistral-Small-3.2-24B-Instruct-2506": (
        "json", 'Let me check.[TOOL_CALLS]get_weather[CALL_ID]Xy7Kp2Qz9[ARGS]{"city": "Paris", "days": 3}',
        '[TOOL_CALLS]get_weather[CALL_ID]Xy7Kp2Qz9[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]get_time[CALL_ID]'
        'Ab3De4Fg5[ARGS]{"city": "Oslo", "days": 1}'),
    "NVIDIA-Nemotron-Nano-v2": ("object", 'Let me check.<TOOLCALL>[{"name": "get_weather", "arguments": {"city": '
                                '"Paris", "days": 3}}]</TOOLCALL>',
                                '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
                                '{"name": "get_time", "arguments": {"city": "Oslo", "days": 1}}]</TOOLCALL>'),
    "google-gemma-4-31B-it": ("tagged", 'Let me check.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}'
                              "<tool_call|>",  # a number unquoted
                              '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>'
                              '<|tool_call>call:get_time{days:1,city:<|"|>Oslo<|"|>}<tool_call|>'),
    "deepseek-ai-DeepSeek-V4": ("tagged", "Let me check.\n\n" + _dsml_calls(WEATHER), _dsml_calls(WEATHER, TIME)),
    "deepseek-ai-DeepSeek-V3.1": (
        "json", "Let me check." + _ds("tool calls begin") + _ds("tool call begin") + "get_weather" + _ds("tool sep")
        + '{"city": "Paris", "days": 3}' + _ds("tool call end") + _ds("tool calls end"),
        _ds("tool calls begin") + _ds("tool call begin") + "get_weather" + _ds("tool sep")
        + '{"city": "Paris", "days": 3}' + _ds("tool call end") + _ds("tool call begin") + "get_time" + _ds("tool sep")
        + '{"city": "Oslo", "days": 1}' + _ds("tool call end") + _ds("tool calls end")),
}


def template(name: str) -> ChatTemplate:
    source = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    return ChatTemplate(TemplateChoice(source, None), "<s>", "</s>", lambda *_: "")


def learned(name: str) -> CallFormat:
    found = learn_call_format(template(name))
    assert found is not None, f"{name}: no format learned"
    return found


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_a_reply_in_the_models_own_format_is_read_back(name: str) -> None:
    kind, one_call, two_calls = REPLIES[name]
    call_format = learned(name)
    assert call_format.arguments == kind
    source = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    plan = plan_tools(TOOLS, "auto", True, source, call_format)
    assert plan is not None and plan.format is ToolFormat.LEARNED
    assert_reads_back(plan, one_call, two_calls)


def assert_reads_back(plan: Any, one_call: str, two_calls: str) -> None:
    """The reply with one call, after an answer, and the reply with two are read into the calls."""
    content, calls = parse_tool_calls(one_call, plan)
    assert content == "Let me check."
    assert [(call.name, json.loads(call.arguments)) for call in calls] == [WEATHER]
    content, calls = parse_tool_calls(two_calls, plan)
    assert content == ""
    assert [(call.name, json.loads(call.arguments)) for call in calls] == [WEATHER, TIME]


def test_text_without_a_call_stays_the_answer() -> None:
    source = (TEMPLATES / "Qwen3-Coder.jinja").read_text(encoding="utf-8")
    plan = plan_tools(TOOLS, "auto", False, source, learned("Qwen3-Coder"))
    assert plan is not None
    assert parse_tool_calls("It is sunny in <b>Paris</b>.", plan) == ("It is sunny in <b>Paris</b>.", [])
    unknown = "<tool_call>\n<function=launch>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
    assert parse_tool_calls(unknown, plan)[1] == []  # not one of the request's tools


def test_a_template_that_writes_no_calls_learns_nothing() -> None:
    chatml = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    assert learn_call_format(ChatTemplate(TemplateChoice(chatml, None), "", "", lambda *_: "")) is None


def test_templates_with_list_methods_render_a_call_history() -> None:
    """Kimi K2 Thinking keeps its call ids in a list it appends to, as llama.cpp's Jinja allows."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "1", "type": "function", "function": {
                    "name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "tool_call_id": "1", "content": "sunny"}]
    prompt = template("Kimi-K2-Thinking").render(messages, True)
    assert "functions.get_weather:0" in prompt and "sunny" in prompt


def test_a_forced_call_grammar_spells_the_templates_format() -> None:
    source = (TEMPLATES / "Qwen3-Coder.jinja").read_text(encoding="utf-8")
    plan = plan_tools(TOOLS, "required", False, source, learned("Qwen3-Coder"))
    assert plan is not None
    grammar = call_grammar(plan, FakeVocabulary())
    assert grammar.startswith("root ::= ")
    assert '"<tool_call>\\n<function="' in grammar and '"get_weather"' in grammar and '"get_time"' in grammar
    assert '"days" ">\\n" ("-"? ("0" | [1-9] [0-9]{0,17})) "\\n</parameter"' in grammar  # an integer's digits
    gemma_source = (TEMPLATES / "google-gemma-4-31B-it.jinja").read_text(encoding="utf-8")
    gemma = plan_tools(TOOLS, "required", False, gemma_source, learned("google-gemma-4-31B-it"))
    assert gemma is not None
    gemma_grammar = call_grammar(gemma, FakeVocabulary())
    assert '"days" ":" ("-"? ("0" | [1-9] [0-9]{0,17}))' in gemma_grammar  # a number unquoted, as Gemma 4 writes it
    assert '"city" ":<|\\"|>" [^<]* "<|\\"|>"' in gemma_grammar
    named = plan_tools(TOOLS, NamedToolChoice(function=NamedFunction(name="get_time")), False, source,
                       learned("Qwen3-Coder"))
    assert named is not None
    assert '"get_weather"' not in call_grammar(named, FakeVocabulary())


def test_a_forced_call_after_an_opened_thinking_ends_the_thinking_first() -> None:
    source = (TEMPLATES / "NVIDIA-Nemotron-Nano-v2.jinja").read_text(encoding="utf-8")
    plan = plan_tools(TOOLS, "required", False, source, learned("NVIDIA-Nemotron-Nano-v2"))
    assert plan is not None
    grammar = call_grammar(plan, FakeVocabulary(), "</think>")
    assert grammar.splitlines()[0] == r'root ::= [^<]* "</think>" [ \n]* thought-out-calls'
    assert grammar.splitlines()[1].startswith('thought-out-calls ::= "<TOOLCALL>["')


def test_a_format_that_repeats_the_key_in_its_closing_tag_is_not_learned() -> None:
    """<key>value</key> (MiniMax M3's) reads the probes back only through the part of their names they share:
    such a format would read no real call, so none is learned."""
    source = ('{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}<invoke name="'
              '{{ c.function.name }}">{% for k, v in c.function.arguments.items() %}<{{ k }}>{{ v }}</{{ k }}>'
              "{% endfor %}</invoke>{% endfor %}{% else %}{{ m.content }}{% endif %}{% endfor %}")
    assert learn_call_format(ChatTemplate(TemplateChoice(source, None), "", "", lambda *_: "")) is None


def test_a_template_that_fails_on_its_own_lists_is_a_bad_request_not_a_crash() -> None:
    """Lists a template builds may be changed (llama.cpp's Jinja allows it); popping an empty one (a tool
    answer without its call, to Kimi's template) is the template's refusal of those messages: a 400."""
    source = ("{% set ids = [] %}{% for m in messages %}{% if m.role == 'tool' %}{{ ids.pop(0) }}{% endif %}"
              "{{ m.content }}{% endfor %}")
    template = ChatTemplate(TemplateChoice(source, None), "", "", lambda *_: "")
    with pytest.raises(InvalidRequestError, match="pop from empty list"):
        template.render([{"role": "user", "content": "hi"}, {"role": "tool", "content": "sunny"}])


def _minimax_calls(*calls: tuple[str, dict[str, Any]]) -> str:
    """Calls as MiniMax M3 writes them: every tag after its namespace token, a parameter tagged by its name."""
    ns = "]<]minimax[>["
    invokes = "\n".join(f'{ns}<invoke name="{name}">' + "".join(f"{ns}<{key}>{value}{ns}</{key}>"
                                                            for key, value in arguments.items()) + f"{ns}</invoke>"
                        for name, arguments in calls)
    return f"{ns}<tool_call>\n{invokes}\n{ns}</tool_call>"


def _atem_call(name: str, arguments: dict[str, Any]) -> str:
    """A call as Muse Glimmer writes it: an ATEM block of its own."""
    parameters = "\n".join(f'<atem:parameter name="{key}">{value}</atem:parameter>' for key, value in arguments.items())
    return f'<atem:function_calls>\n<atem:invoke name="{name}">\n{parameters}\n</atem:invoke>\n</atem:function_calls>'


DECLARED = {  # templates whose calls cannot be learned: their models' calls, one and two (declared_formats.py)
    "LFM2-8B-A1B": ('Let me check.<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>',
                    '<|tool_call_start|>[get_weather(city="Paris", days=3), get_time(city="Oslo", days=1)]'
                    "<|tool_call_end|>"),
    "LFM2.5-Instruct": ("Let me check.<|tool_call_start|>[get_weather(city='Paris', days=3)]<|tool_call_end|>",
                        "<|tool_call_start|>[get_weather(days=3,city=\"Paris\"),get_time(city='Oslo', days=1)]"
                        "<|tool_call_end|>"),
    "ibm-granite-granite-3.3-2B-Instruct": (
        'Let me check.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
        '{"arguments": {"city": "Oslo", "days": 1}, "name": "get_time"}]'),
    "MiniMax-M3": ("Let me check." + _minimax_calls(WEATHER), _minimax_calls(WEATHER, TIME)),
    "muse-glimmer": (  # as app/handlers/harmony.py gives them: each message's ATEM block
        "Let me check." + _atem_call(*WEATHER), _atem_call(*WEATHER) + _atem_call(*TIME)),
    "meetkai-functionary-medium-v3.2": (  # as app/handlers/recipients.py gives them (after its answer's >>>all)
        'Let me check.>>>get_weather\n{"city": "Paris", "days": 3}',
        '>>>get_weather\n{"city": "Paris", "days": 3}>>>get_time\n{"city": "Oslo", "days": 1}'),
}


def declared_plan(name: str, choice: Any = "auto") -> Any:
    source = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    assert learn_call_format(template(name)) is None  # nothing to learn: the format is declared
    plan = plan_tools(TOOLS, choice, True, source, declared_call_format(source))
    assert plan is not None and plan.format is ToolFormat.LEARNED
    return plan


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_a_reply_in_a_declared_format_is_read_back(name: str) -> None:
    one_call, two_calls = DECLARED[name]
    plan = declared_plan(name)
    assert_reads_back(plan, one_call, two_calls)
    assert parse_tool_calls("It is sunny in Paris.", plan) == ("It is sunny in Paris.", [])


def test_keyword_arguments_take_json_and_python_literals() -> None:
    plan = declared_plan("LFM2.5-Instruct")
    reply = ("<|tool_call_start|>[get_weather(city='Paris, France', days=[1, 2], hot=True, cold=false, "
             'note="a \\"quoted\\" word", none=None)]<|tool_call_end|>')
    calls = parse_tool_calls(reply, plan)[1]
    assert [json.loads(call.arguments) for call in calls] == [
        {"city": "Paris, France", "days": [1, 2], "hot": True, "cold": False, "note": 'a "quoted" word', "none": None}]
    assert parse_tool_calls("<|tool_call_start|>[get_time()]<|tool_call_end|>", plan)[1][0].arguments == "{}"
    broken = "<|tool_call_start|>[get_weather(city=Paris)]<|tool_call_end|>"  # not a literal: no call
    assert parse_tool_calls(broken, plan) == (broken, [])


def test_a_forced_call_in_a_declared_format_spells_it() -> None:
    grammar = call_grammar(declared_plan("LFM2-8B-A1B", "required"), FakeVocabulary())
    assert grammar.splitlines()[0] == 'root ::= "<|tool_call_start|>[" call (", " call)* "]<|tool_call_end|>"'
    assert '"get_weather" "("' in grammar and '"days" "=" t0-p1-root' in grammar  # a value as its schema's JSON
    granite = call_grammar(declared_plan("ibm-granite-granite-3.3-2B-Instruct", "required"), FakeVocabulary())
    assert granite.splitlines()[0] == 'root ::= "<|tool_call|>[" call (", " call)* "]"'
    minimax = call_grammar(declared_plan("MiniMax-M3", "required"), FakeVocabulary())
    assert '"]<]minimax[>[<" "city" ">" [^\\]]* "]<]minimax[>[</city>"' in minimax  # the key closes its value


def test_only_the_declared_templates_have_a_declared_format() -> None:
    for name in sorted(REPLIES):
        assert declared_call_format((TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")) is None


def tags_of(name: str) -> ThinkingTags:
    """The thinking tags the server takes for the template: those it shows, else llama.cpp's default."""
    return analyse_thinking(template(name)).tags or THINK


@pytest.mark.parametrize(("name", "opening", "closing"), [
    ("ByteDance-Seed-OSS", "<seed:think>", "</seed:think>"),  # around an answer's reasoning
    ("MiniMax-M3", "<mm:think>", "</mm:think>"),  # the same, though its system text names the tags too
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "<|START_THINKING|>", "<|END_THINKING|>"),  # an empty
    # thought the prompt ends with when thinking is off
    ("Qwen3-Coder", "<think>", "</think>"),  # shows no thinking: llama.cpp's default
    ("Kimi-K2-Thinking", "<think>", "</think>"),
])
def test_a_templates_thinking_tags_are_found(name: str, opening: str, closing: str) -> None:
    tags = tags_of(name)
    assert (tags.open, tags.close) == (opening, closing)


def test_tags_a_prompt_closes_at_once_when_thinking_is_off_are_found() -> None:
    """DeepSeek V3.1's generation prompt ends with ``<think>`` when thinking is on and ``<think></think>`` when
    off: its tags are found there (what a continued message writes), unlike a template that shows none."""
    v31 = analyse_thinking(template("deepseek-ai-DeepSeek-V3.1")).tags
    assert v31 is not None and (v31.open, v31.close) == ("<think>", "</think>")
    assert analyse_thinking(template("Qwen3-Coder")).tags is None


def test_thinking_tags_keep_the_blanks_written_around_a_thought() -> None:
    """llama.cpp's reasoning start and end: the tags with the blanks the template writes after the opening one
    and around the closing one (what a continued message's prompt writes: app/templating/continuation.py)."""
    seed = tags_of("ByteDance-Seed-OSS")
    assert (seed.start, seed.end) == ("<seed:think>", "</seed:think>\n")
    qwen3 = tags_of("Qwen3-Coder")
    assert (qwen3.start, qwen3.end) == ("<think>", "</think>")  # it shows no thought: the bare default


def test_a_thought_in_the_templates_tags_is_split_out() -> None:
    tags = ThinkingTags("<|START_THINKING|>", "<|END_THINKING|>")
    split = split_reasoning("<|START_THINKING|>Rain is likely.<|END_THINKING|>Take an umbrella.", "auto", False, tags)
    assert (split.reasoning, split.content) == ("Rain is likely.", "Take an umbrella.")
    assert split_reasoning("<think>a</think>b", "auto", False, tags).reasoning is None  # not this template's tags
    stream = ReasoningStream("auto", False, tags)
    pieces = [stream.feed(piece) for piece in ("<|START_", "THINKING|>Rain", " is likely.<|END_", "THINKING|>Take")]
    pieces.append(stream.feed("", final=True))
    assert "".join(reasoning for reasoning, _ in pieces) == "Rain is likely."
    assert "".join(content for _, content in pieces) == "Take"
