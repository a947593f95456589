"""Learning a chat template's own tool-call format by rendering probes through it, as llama.cpp's
differential autoparser does for the templates it has no handler of its own for (Qwen3-Coder's and
GLM's tagged arguments, Kimi's and DeepSeek's call sections, Cohere's and Nemotron's JSON lists, ...).

Three renderings of one conversation are compared: the assistant answering with text, with one call
and with two calls. What differs is the calls' text; in it the probe function's name, its argument
names and values are found, and the text around them becomes the format (``CallFormat``): what opens
the calls' section, what comes before and after each call, between the name and the arguments, and
the arguments as one JSON object, as tagged name/value pairs, or (``object``) the whole call one JSON
object holding the name and the arguments. A format is kept only if reading the template's own
renderings back gives the probe calls; otherwise the template has none (``learn_call_format`` is None).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from app.protocol.errors import InvalidRequestError
from app.templating.call_format import CALL_IDS, CallFormat, decoded_arguments, json_at
from app.templating.template_caps import common_prefix, common_suffix

FUNCTIONS = ("probe_fn_first", "probe_fn_second")
ARGUMENTS = {"probe_arg_first": "probe_val_first", "probe_arg_second": "probe_val_second"}
ANSWER = "Zq probe answer Zq"


class Renders(Protocol):
    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               tools: list[dict[str, Any]] | None = None, extra: dict[str, Any] | None = None) -> str: ...


def _call(index: int) -> dict[str, Any]:
    return {"id": CALL_IDS[index], "type": "function", "function": {"name": FUNCTIONS[index], "arguments": ARGUMENTS}}


PROBE_TOOLS = [{"type": "function", "function": {
    "name": name, "description": "A probe function", "parameters": {
        "type": "object", "properties": {key: {"type": "string"} for key in ARGUMENTS}, "required": []}}}
    for name in FUNCTIONS]


def _assistant_turns(template: Renders) -> tuple[str, str | None] | None:
    """The text of an assistant turn of one call and of two calls (None: the template renders no second call),
    cut out of the whole conversation by what they share with a turn that answers in text."""
    user = {"role": "user", "content": "Zq probe question Zq"}

    def render(assistant: dict[str, Any]) -> str:
        return template.render([user, {"role": "assistant", **assistant}], False, PROBE_TOOLS)

    try:
        answered = render({"content": ANSWER})
        one = render({"content": "", "tool_calls": [_call(0)]})
    except InvalidRequestError:
        return None
    try:
        two: str | None = render({"content": "", "tool_calls": [_call(0), _call(1)]})
    except InvalidRequestError:
        two = None
    if two is not None:
        two = two.replace(CALL_IDS[1], CALL_IDS[0])  # one id to generalise: the calls differ only in their names
    head = _whole_words_before(one, common_prefix(answered, one))
    tail = len(one) - _whole_words_after(one, len(one) - min(common_suffix(answered, one), len(one) - head))
    if two is not None and (not two.startswith(one[:head]) or not two.endswith(one[len(one) - tail:])):
        two = None
    return one[head:len(one) - tail], (two[head:len(two) - tail] if two is not None else None)


_MARKER_OPENERS = "<|[\uff5c"  # what opens a special token: <|, [, DeepSeek's fullwidth bar
_MARKER_CLOSERS = "|>]\uff5c"


def _whole_words_before(text: str, cut: int) -> int:
    """A cut moved back to where the word it falls in starts (and the special token's opening before it): the
    shared text of two renderings may end inside a marker (Cohere's ``<|START_`` of RESPONSE and of ACTION)."""
    if 0 < cut < len(text) and _wordy(text[cut]) and (_wordy(text[cut - 1]) or text[cut - 1] in _MARKER_OPENERS):
        while cut > 0 and _wordy(text[cut - 1]):
            cut -= 1
        while cut > 0 and text[cut - 1] in _MARKER_OPENERS:
            cut -= 1
    return cut


def _whole_words_after(text: str, cut: int) -> int:
    """A cut moved on to where the word it falls in ends, and its special token's closing ``|>``."""
    if 0 < cut < len(text) and _wordy(text[cut - 1]) and (_wordy(text[cut]) or text[cut] in _MARKER_CLOSERS):
        while cut < len(text) and _wordy(text[cut]):
            cut += 1
        while cut < len(text) and text[cut] in _MARKER_CLOSERS:
            cut += 1
    return cut


def _wordy(char: str) -> bool:
    return char.isalnum() or char in "_\u2581"


def learn_call_format(template: Renders) -> CallFormat | None:
    """The template's call format, or None when it renders no calls that this can learn and read back."""
    turns = _assistant_turns(template)
    if turns is None:
        return None
    one, two = turns
    shape = _call_shape(one)
    if shape is None:
        return None
    learned = _with_sections(shape, one, two)
    if not _reads_back(learned, one, two) or _holds_probe_text(learned):
        return None
    return _with_typed_values(template, learned)


TYPED_ARGUMENTS = {**ARGUMENTS, "probe_arg_first": 12345}


def _with_typed_values(template: Renders, learned: CallFormat) -> CallFormat:
    """Tagged arguments with what stands around a number where it is not what stands around a string
    (DeepSeek V3.2's string="false", Gemma 4's and LFM2.5's unquoted numbers), kept if it reads back."""
    if learned.arguments != "tagged":
        return learned
    call = {**_call(0), "function": {"name": FUNCTIONS[0], "arguments": TYPED_ARGUMENTS}}
    try:
        text = template.render([{"role": "user", "content": "Zq probe question Zq"},
                                {"role": "assistant", "content": "", "tool_calls": [call]}], False, PROBE_TOOLS)
    except InvalidRequestError:
        return learned
    (key_one, _), (key_two, _) = ARGUMENTS.items()
    number = str(TYPED_ARGUMENTS[key_one])
    first = text.find(key_one, text.rfind(FUNCTIONS[0]))
    value_at = text.find(number, first)
    second = text.find(key_two, value_at)
    joint = learned.pair_separator + learned.key_start
    between = text[value_at + len(number):second]
    if min(first, value_at, second) < 0 or not between.endswith(joint):
        return learned
    typed = replace(learned, typed_key_end=text[first + len(key_one):value_at],
                    typed_value_end=between[:len(between) - len(joint)])
    if (typed.typed_key_end, typed.typed_value_end) == (learned.key_end, learned.value_end):
        return learned
    parsed = typed.parse(text[text.rfind(learned.section_start + learned.call_start):], list(FUNCTIONS))
    reads_back = parsed is not None and [call.arguments for call in parsed[1]] == [
        {key: str(value) for key, value in TYPED_ARGUMENTS.items()}]
    return typed if reads_back and not _holds_probe_text(typed) else learned


_PROBE_WORDS = ("probe", "first", "second")


def _holds_probe_text(learned: CallFormat) -> bool:
    """Whether a part of the format took in some of a probe's names: a template that closes a value with its key
    (MiniMax M3's <key>value</key>) reads its probes back through shared parts of their names, and nothing
    else."""
    parts = (learned.section_start, learned.call_start, learned.name_end, learned.call_end, learned.section_end,
             learned.separator or "", learned.key_start, learned.key_end, learned.value_end, learned.pair_separator,
             learned.typed_key_end or "", learned.typed_value_end)
    return any(word in part for part in parts for word in _PROBE_WORDS)


@dataclass(frozen=True)
class _Shape:
    """One call in a rendered turn: where its name starts and its arguments end, and the format's parts
    found inside it (sections not yet split off)."""

    name_at: int
    arguments_end: int
    format: CallFormat


def _call_shape(turn: str) -> _Shape | None:
    name_at = turn.find(FUNCTIONS[0])
    if name_at < 0:
        return None
    return _object_shape(turn, name_at) or _json_shape(turn, name_at) or _tagged_shape(turn, name_at)


def _object_shape(turn: str, name_at: int) -> _Shape | None:
    """The whole call one JSON object, the innermost holding both the name and the arguments."""
    found = _call_object(turn, name_at, FUNCTIONS[0])
    if found is None:
        return None
    start, end, name_path, arguments_path = found
    learned = CallFormat("object", "", turn[:start], "", turn[end:], "", None,
                         name_path=name_path, arguments_path=arguments_path)
    return _Shape(start, end, learned)


def _call_object(turn: str, name_at: int, function: str
                 ) -> tuple[int, int, tuple[str, ...], tuple[str, ...]] | None:
    """The innermost JSON object around ``name_at`` holding ``function``'s name and the probe arguments: where
    it starts and ends, and the keys to the name and to the arguments."""
    for start in range(name_at, -1, -1):
        if turn[start] != "{":
            continue
        value, end = json_at(turn, start)
        if end < name_at or not isinstance(value, dict):
            continue
        name_path, arguments_path = _path_to(value, function), _path_to(value, ARGUMENTS)
        if name_path is not None and arguments_path is not None:
            return start, end, name_path, arguments_path
    return None


def _path_to(value: Any, wanted: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    if value == wanted or (isinstance(value, str) and wanted is ARGUMENTS and decoded_arguments(value) == ARGUMENTS):
        return path
    if isinstance(value, dict):
        for key, inner in value.items():
            found = _path_to(inner, wanted, (*path, key))
            if found is not None:
                return found
    return None


def _json_shape(turn: str, name_at: int) -> _Shape | None:
    after_name = name_at + len(FUNCTIONS[0])
    start = turn.find("{", after_name)
    if start < 0:
        return None
    value, end = json_at(turn, start)
    if value != ARGUMENTS:
        return None
    learned = CallFormat("json", "", turn[:name_at], turn[after_name:start], turn[end:], "", None)
    return _Shape(name_at, end, learned)


def _tagged_shape(turn: str, name_at: int) -> _Shape | None:
    """Arguments as key/value pairs between tags: the text before each key is what the text after the name
    and the text between the two pairs end with."""
    (key_one, value_one), (key_two, value_two) = ARGUMENTS.items()
    spots = [turn.find(text, name_at) for text in (key_one, value_one, key_two, value_two)]
    if -1 in spots or spots != sorted(spots):
        return None
    after_name = name_at + len(FUNCTIONS[0])
    before_first = turn[after_name:spots[0]]
    between = turn[spots[1] + len(value_one):spots[2]]
    key_end = turn[spots[0] + len(key_one):spots[1]]
    if key_end != turn[spots[2] + len(key_two):spots[3]]:
        return None
    shared = common_suffix(before_first, between)
    key_start, value_end = between[len(between) - shared:], between[:len(between) - shared]
    closing = turn[spots[3] + len(value_two):]
    ends = common_prefix(value_end, closing)  # what closes a value; after it, what separates two pairs
    value_end, pair_separator = value_end[:ends], value_end[ends:]
    if not (key_start or key_end) or not (value_end or pair_separator or key_start):
        return None
    arguments_end = spots[3] + len(value_two) + len(value_end)
    learned = CallFormat("tagged", "", turn[:name_at], before_first[:len(before_first) - shared],
                         turn[arguments_end:], "", None, key_start=key_start, key_end=key_end, value_end=value_end,
                         pair_separator=pair_separator)
    return _Shape(name_at, arguments_end, learned)


def _with_sections(shape: _Shape, one: str, two: str | None) -> CallFormat:
    """Splits what opens and closes the calls' section off each call's own text, from the turn of two calls:
    between the calls stands the end of one call, a separator and the start of the next."""
    learned = shape.format
    before, after = one[:shape.name_at], one[shape.arguments_end:]
    second = two.find(FUNCTIONS[1]) if two is not None else -1
    if two is None or second < 0:
        return learned
    if learned.arguments == "object":  # the second call starts where its object does
        found = _call_object(two, second, FUNCTIONS[1])
        second = found[0] if found is not None else -1
    if second < shape.arguments_end:
        return learned
    between = two[shape.arguments_end:second]
    ends = common_prefix(after, between)  # cut at a token's edge: <|tool_response> and <|tool_call> share <|tool_
    ends = min(_whole_words_before(after, ends), _whole_words_before(between, ends))
    starts = common_suffix(before, between[ends:])
    return replace(learned, section_start=before[:len(before) - starts], call_start=before[len(before) - starts:],
                   call_end=after[:ends], section_end=after[ends:], separator=between[ends:len(between) - starts])


def _reads_back(learned: CallFormat, one: str, two: str | None) -> bool:
    def calls(turn: str, count: int) -> bool:
        parsed = learned.parse(turn, list(FUNCTIONS))
        return parsed is not None and [(call.name, call.arguments) for call in parsed[1]] == [
            (name, ARGUMENTS) for name in FUNCTIONS[:count]]

    return calls(one, 1) and (learned.separator is None or two is None or calls(two, 2))
