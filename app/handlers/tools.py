"""Tool calling: the call format a chat template speaks, a grammar that forces a valid call, and
parsing calls out of the generated text.

Formats, picked from the chat template's source:

    hermes    <tool_call>{"name": ..., "arguments": {...}}</tool_call>   (Hermes, Qwen 2.5/3)
    mistral   [TOOL_CALLS][{"name": ..., "arguments": {...}}]             (Mistral)
    llama3    {"name": ..., "parameters": {...}}, maybe after <|python_tag|> (Llama 3.x)
    learned   the template's own, learned by rendering probe calls through it (app/templating/call_format.py:
              Qwen3-Coder's and GLM's tagged arguments, Kimi's and DeepSeek's sections, JSON lists, ...)
    generic   {"tool_calls": [{"name": ..., "arguments": {...}}]}         (any other template: the tools
              and this format are described to the model in a system message)

Parsing tries the template's format first and the generic JSON forms after it.
"""

from __future__ import annotations

import enum
import json
import re
import secrets
import string
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.engine import Vocabulary
from app.engine.json_schema import schema_grammar
from app.handlers.learned_calls import gbnf_class_char, gbnf_literal, learned_grammar, typed_arguments
from app.protocol.errors import InvalidRequestError
from app.templating.call_format import CallFormat


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: FunctionSpec


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class ToolFormat(enum.Enum):
    HERMES = "hermes"
    MISTRAL = "mistral"
    LLAMA3 = "llama3"
    LEARNED = "learned"
    GENERIC = "generic"


def detect_format(template_source: str, learned: CallFormat | None = None) -> ToolFormat:
    """The format a template's calls are read in: one of the three this server knows by name (Hermes' JSON in
    <tool_call>, Mistral's JSON list, Llama 3's JSON) where the template speaks it and what was learned from
    the template (``learn_call_format``) agrees, else the learned one, else the generic one."""
    named = _named_format(template_source)
    if named is not None and (learned is None or _agrees(named, learned)):
        return named
    return ToolFormat.LEARNED if learned is not None else ToolFormat.GENERIC


def _named_format(template_source: str) -> ToolFormat | None:
    if "<tool_call>" in template_source:
        return ToolFormat.HERMES
    if "[TOOL_CALLS]" in template_source:
        return ToolFormat.MISTRAL
    if "<|python_tag|>" in template_source or "ipython" in template_source:
        return ToolFormat.LLAMA3
    return None


def _agrees(named: ToolFormat, learned: CallFormat) -> bool:
    """Whether the template's learned calls are the named format's: one JSON object each, opened as it opens
    them (Qwen3-Coder's <tool_call> holds tagged arguments; Apriel's <tool_calls> a list; Functionary's Llama
    template writes <function=...>)."""
    marker = learned.marker
    opens = {ToolFormat.HERMES: marker.startswith("<tool_call>") and not marker.startswith("<tool_calls>"),
             ToolFormat.MISTRAL: marker.startswith("[TOOL_CALLS]"),
             ToolFormat.LLAMA3: marker in ("", "<|python_tag|>")}
    return learned.arguments == "object" and opens.get(named, False)


def template_renders_tools(template_source: str, learned: CallFormat | None = None) -> bool:
    return detect_format(template_source, learned) is not ToolFormat.GENERIC and "tools" in template_source


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str

    def openai(self, index: int | None = None) -> dict[str, Any]:
        call: dict[str, Any] = {"id": self.id, "type": "function",
                                "function": {"name": self.name, "arguments": self.arguments}}
        if index is not None:
            call["index"] = index
        return call


_ID_CHARS = string.ascii_letters + string.digits


def new_call_id() -> str:
    return "call_" + "".join(secrets.choice(_ID_CHARS) for _ in range(24))


@dataclass(frozen=True)
class ToolPlan:
    """What a request's tools mean for one generation."""

    tools: tuple[ToolSpec, ...]
    format: ToolFormat
    forced: str | None  # "required", a function name, or None for auto
    parallel: bool
    learned: CallFormat | None = None  # the template's own format (``ToolFormat.LEARNED``)

    @property
    def names(self) -> list[str]:
        return [tool.function.name for tool in self.tools]


def plan_tools(
    tools: list[ToolSpec] | None, choice: ToolChoice | None, parallel: bool, template_source: str,
    learned: CallFormat | None = None,
) -> ToolPlan | None:
    """None when no tool may be called (no tools, or ``tool_choice: none``)."""
    if choice is not None and not tools and choice != "none" and choice != "auto":
        raise InvalidRequestError("Field 'tool_choice': requires a non-empty 'tools' list")
    if not tools or choice == "none":
        return None
    names = [tool.function.name for tool in tools]
    forced: str | None = None
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in names:
            raise InvalidRequestError(
                f"Field 'tool_choice': no tool named {choice.function.name!r} (tools: {', '.join(names)})"
            )
        forced = choice.function.name
    elif choice == "required":
        forced = "required"
    tool_format = detect_format(template_source, learned)
    return ToolPlan(tuple(tools), tool_format, forced, parallel, learned if tool_format is ToolFormat.LEARNED else None)


def _call_schema(plan: ToolPlan) -> dict[str, Any]:
    key = "parameters" if plan.format is ToolFormat.LLAMA3 else "arguments"
    tools = [t for t in plan.tools if plan.forced in (None, "required", t.function.name)]
    options = [
        {"type": "object", "properties": {"name": {"const": t.function.name}, key: t.function.parameters},
         "required": ["name", key]}
        for t in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def call_grammar(plan: ToolPlan, vocab: Vocabulary, thinking_end: str | None = None) -> str:
    """GBNF that only lets the model emit valid call(s) in the template's format; ``thinking_end``: the prompt
    opened a thinking block, which the model ends (text without the tag's first character, then the tag)
    before the call."""
    grammar = _call_grammar(plan, vocab)
    if not thinking_end:
        return grammar
    return (f"root ::= [^{gbnf_class_char(thinking_end[0])}]* {gbnf_literal(thinking_end)} [ \\n]* thought-out-calls\n"
            + re.sub(r"^root ::=", "thought-out-calls ::=", grammar, count=1, flags=re.MULTILINE))


def _call_grammar(plan: ToolPlan, vocab: Vocabulary) -> str:
    if plan.learned is not None:
        chosen = [(t.function.name, t.function.parameters) for t in plan.tools
                  if plan.forced in (None, "required", t.function.name)]
        return learned_grammar(plan.learned, chosen, plan.parallel, vocab)
    if plan.format is ToolFormat.GENERIC:
        schema = {"type": "object", "properties": {"tool_calls": {
            "type": "array", "items": _call_schema(plan), "minItems": 1,
            **({} if plan.parallel else {"maxItems": 1}),
        }}, "required": ["tool_calls"]}
        return schema_grammar(vocab, schema)
    rules = re.sub(r"^root ::=", "call ::=", schema_grammar(vocab, _call_schema(plan)), flags=re.MULTILINE)
    if plan.format is ToolFormat.HERMES:
        one = f"{gbnf_literal('<tool_call>')} \"\\n\"? call \"\\n\"? {gbnf_literal('</tool_call>')}"
        root = f"root ::= tc (\"\\n\" tc)*\ntc ::= {one}" if plan.parallel else f"root ::= {one}"
    elif plan.format is ToolFormat.MISTRAL:
        more = ' ("," " "? call)*' if plan.parallel else ""
        root = f"root ::= {gbnf_literal('[TOOL_CALLS]')} \"[\" call{more} \"]\""
    else:
        root = "root ::= call"
    return f"{root}\n{rules}"


def tools_system_prompt(plan: ToolPlan) -> str:
    """For templates that know nothing of tools: describe them and the generic call format."""
    described = [
        {"name": t.function.name, "description": t.function.description or "", "parameters": t.function.parameters}
        for t in plan.tools
    ]
    return (
        "You can call the following tools:\n" + json.dumps(described, ensure_ascii=False) + "\n"
        'To call tools, answer only with a JSON object: {"tool_calls": [{"name": "<tool name>", '
        '"arguments": {<arguments>}}]}. Otherwise answer normally.'
    )


def call_markers(plan: ToolPlan) -> tuple[str, ...]:
    """Text that a response starting with it is (probably) a tool call."""
    markers = {
        ToolFormat.HERMES: ("<tool_call>",),
        ToolFormat.MISTRAL: ("[TOOL_CALLS]",),
        ToolFormat.LLAMA3: ("<|python_tag|>", "{"),
        ToolFormat.LEARNED: (plan.learned.marker,) if plan.learned is not None and plan.learned.marker else (),
        ToolFormat.GENERIC: ("{",),
    }
    return (*markers[plan.format], "{")


_NAMED_MARKUP = {ToolFormat.HERMES: ("<tool_call>", "</tool_call>"), ToolFormat.MISTRAL: ("[TOOL_CALLS]", "[ARGS]",
                 "[CALL_ID]"), ToolFormat.LLAMA3: ("<|python_tag|>",)}


def format_markup(template_source: str, learned: CallFormat | None) -> tuple[str, ...]:
    """The text the template's call format writes around calls (what the model must be able to write)."""
    tool_format = detect_format(template_source, learned)
    if tool_format is ToolFormat.LEARNED and learned is not None:
        return learned.markup
    return _NAMED_MARKUP.get(tool_format, ())


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _as_call(item: Any, names: list[str]) -> ToolCall | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("function"), dict):
        item = item["function"]
    name = item.get("name")
    arguments = item.get("arguments", item.get("parameters", {}))
    if not isinstance(name, str) or (names and name not in names):
        return None
    if isinstance(arguments, str):
        parsed = _load(arguments)
        arguments = parsed if parsed is not None else arguments
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(new_call_id(), name, text)


def _calls(items: list[Any], names: list[str]) -> list[ToolCall] | None:
    calls = [_as_call(item, names) for item in items]
    if not calls or any(call is None for call in calls):
        return None
    return [call for call in calls if call is not None]


def _generic(text: str, names: list[str]) -> list[ToolCall] | None:
    value = _load(text.strip())
    if isinstance(value, dict):
        if isinstance(value.get("tool_calls"), list):
            return _calls(value["tool_calls"], names)
        if isinstance(value.get("tool_call"), dict):
            return _calls([value["tool_call"]], names)
        return _calls([value], names)
    if isinstance(value, list):
        return _calls(value, names)
    return None


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str, plan: ToolPlan) -> tuple[str, list[ToolCall]]:
    """Split generated text into (remaining content, tool calls)."""
    names = plan.names
    if plan.learned is not None:
        parsed = plan.learned.parse(text, names)
        if parsed is not None:
            parameters = {t.function.name: t.function.parameters for t in plan.tools}
            return parsed[0].strip(), [ToolCall(new_call_id(), call.name, _arguments_text(
                typed_arguments(call, parameters[call.name]))) for call in parsed[1]]
    if plan.format is ToolFormat.HERMES and "<tool_call>" in text:
        found = [_as_call(_load(match), names) for match in _HERMES.findall(text)]
        calls = [call for call in found if call is not None]
        if calls:
            return _HERMES.sub("", text).strip(), calls
    if plan.format is ToolFormat.MISTRAL and "[TOOL_CALLS]" in text:
        head, _, tail = text.partition("[TOOL_CALLS]")
        calls = _generic(tail, names) or []
        if calls:
            return head.strip(), calls
    if plan.format is ToolFormat.LLAMA3 and "<|python_tag|>" in text:
        head, _, tail = text.partition("<|python_tag|>")
        calls = [call for part in tail.split(";") if (call := _as_call(_load(part.strip()), names))]
        if calls:
            return head.strip(), calls
    calls = _generic(text, names) or []
    if calls:
        return "", calls
    return text, []


def messages_for_template(messages: list[dict[str, Any]], plan: ToolPlan | None, renders_tools: bool,
                          object_arguments: bool = True) -> list[dict[str, Any]]:
    """Assistant tool calls with their arguments as objects where the template takes them so
    (``object_arguments``: its caps' ``supports_object_arguments``; else as the client sent them, as
    llama-server: Functionary v3.2's adds them to a string); for templates without tool support, the calls as
    generic JSON text and the tools in a system message."""
    out = []
    for message in messages:
        message = dict(message)
        calls = message.get("tool_calls")
        if calls:
            parsed_calls = []
            for call in calls:
                function = dict(call.get("function", {}))
                if isinstance(function.get("arguments"), str):
                    parsed = _load(function["arguments"])
                    if parsed is not None:
                        function["arguments"] = parsed
                parsed_calls.append({**call, "function": function})
            message["tool_calls"] = parsed_calls if object_arguments else calls
            if not renders_tools and not message.get("content"):
                message["content"] = json.dumps({"tool_calls": [
                    {"name": c["function"].get("name"), "arguments": c["function"].get("arguments")}
                    for c in parsed_calls
                ]}, ensure_ascii=False)
        out.append(message)
    if plan is not None and not renders_tools:
        prompt = tools_system_prompt(plan)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}"}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out
