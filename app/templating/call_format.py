"""A chat template's own tool-call format (learned from the template by app/templating/call_learning.py),
and reading the calls a model wrote in it."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

CALL_IDS = ("a1b2c3d4e", "f5g6h7i8j")  # the probe calls' ids (nine letters and digits, as Mistral's templates insist)
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: Any  # a dict, or the text of arguments that are not JSON


@dataclass(frozen=True)
class CallFormat:
    """The text around a template's tool calls: ``section_start`` (call ``separator`` call)* ``section_end``,
    each call ``call_start`` name ``name_end`` arguments ``call_end``; tagged arguments are pairs
    ``key_start`` key ``key_end`` value ``value_end``, ``pair_separator`` between two; an ``object`` call is
    one JSON object with the name at ``name_path`` and the arguments at ``arguments_path``; ``python``
    arguments are keyword arguments, ``key=value`` with ``pair_separator`` between two, each value a JSON or
    Python literal (LFM2's ``[get_weather(city="Paris", days=3)]``)."""

    arguments: Literal["json", "tagged", "object", "python"]
    section_start: str
    call_start: str
    name_end: str
    call_end: str
    section_end: str
    separator: str | None  # None: the template renders one call a turn
    key_start: str = ""
    key_end: str = ""
    value_end: str = ""
    key_closes_value: str | None = None  # a value closed by value_end, its key, then this (MiniMax M3's </city>)
    pair_separator: str = ""  # between two tagged pairs (Gemma 4's ","), after the first's value_end
    typed_key_end: str | None = None  # around a value that is not a string, where it differs (DeepSeek's
    typed_value_end: str = ""  # string="false", Gemma 4's unquoted numbers); None: the same
    name_path: tuple[str, ...] = ()
    arguments_path: tuple[str, ...] = ()

    @property
    def marker(self) -> str:
        """The text that opens the calls, to its first blank or call id (what a reply that is a call starts
        with; the model's blanks and ids differ from the template's)."""
        return re.split(r"\s+|" + "|".join(CALL_IDS), (self.section_start + self.call_start).strip())[0]

    def parse(self, text: str, names: list[str]) -> tuple[str, list[ParsedCall]] | None:
        """(text before the calls, the calls); None when the text holds no call in this format."""
        opening = _pattern(self.section_start + self.call_start).search(text)
        if opening is None:
            return None
        calls: list[ParsedCall] = []
        position = opening.start() + _matched_length(self.section_start, text, opening.start())
        while True:
            parsed = self._call(text, position, names)
            if parsed is None:
                break
            calls.append(parsed[0])
            position = parsed[1]
            after = _pattern(self.separator).match(text, position) if self.separator is not None else None
            if after is None or _pattern(self.call_start).match(text, after.end()) is None:
                break
            position = after.end()
        if not calls:
            return None
        return text[:opening.start()], calls

    def _call(self, text: str, position: int, names: list[str]) -> tuple[ParsedCall, int] | None:
        start = _pattern(self.call_start).match(text, position)
        if start is None:
            return None
        if self.arguments == "object":
            return self._object_call(text, start.end(), names)
        named = self._name(text, start.end(), names)
        if named is None:
            return None
        name, position = named
        if self.arguments == "json":
            arguments, end = json_at(text, position)
            if end < 0:
                return None
        elif self.arguments == "python":
            keywords = _keyword_arguments(text, position, self.pair_separator)
            if keywords is None:
                return None
            arguments, end = keywords
        else:
            arguments, end = self._tagged(text, position)
        close = _pattern(self.call_end).match(text, end)
        if close is None:
            return None
        return ParsedCall(name, arguments), close.end()

    def _name(self, text: str, position: int, names: list[str]) -> tuple[str, int] | None:
        """One of the tools' names at ``position`` (the longest that fits) and where ``name_end`` ends."""
        for name in sorted(names, key=len, reverse=True):
            if text.startswith(name, position):
                after = _pattern(self.name_end).match(text, position + len(name))
                if after is not None:
                    return name, after.end()
        return None

    def _object_call(self, text: str, position: int, names: list[str]) -> tuple[ParsedCall, int] | None:
        value, end = json_at(text, position)
        name, arguments = _at(value, self.name_path), _at(value, self.arguments_path)
        if end < 0 or not isinstance(name, str) or (names and name not in names):
            return None
        close = _pattern(self.call_end).match(text, end)
        if close is None:
            return None
        return ParsedCall(name, decoded_arguments(arguments)), close.end()

    @property
    def markup(self) -> tuple[str, ...]:
        """Every literal piece of text the format writes around names and values."""
        pieces = (self.section_start, self.call_start, self.name_end, self.call_end, self.section_end,
                  self.separator, self.key_start, self.key_end, self.value_end, self.key_closes_value,
                  self.pair_separator, self.typed_key_end, self.typed_value_end)
        return tuple(piece for piece in pieces if piece)

    def written(self, name: str, arguments: str) -> str:
        """One call as the format writes it, its arguments given as written (what ``parse`` reads back)."""
        return (self.section_start + self.call_start + name + self.name_end + arguments + self.call_end
                + self.section_end)

    def value_closing(self, key: str) -> str:
        """What closes a tagged value of ``key``."""
        return self.value_end + (key + self.key_closes_value if self.key_closes_value is not None else "")

    def _tagged(self, text: str, position: int) -> tuple[dict[str, str], int]:
        closing = _regex(self.value_end)
        if self.key_closes_value is not None:
            closing += "(?P=key)" + _regex(self.key_closes_value)
        value = _regex(self.key_end) + r"(?P<value>.*?)" + closing
        if self.typed_key_end is not None:
            value = f"(?:{value}|{_regex(self.typed_key_end)}(?P<typed>.*?){_regex(self.typed_value_end)})"
        body = (_regex(self.key_start) + r"(?P<key>.+?)" + value + "(?=" + _regex(self.pair_separator + self.key_start)
                + "|" + _regex(self.call_end) + ")")
        first, then = re.compile(body, re.DOTALL), re.compile(_regex(self.pair_separator) + body, re.DOTALL)
        arguments: dict[str, str] = {}
        while (found := (then if arguments else first).match(text, position)) is not None:
            arguments[found["key"]] = found["value"] if found["value"] is not None else found["typed"]
            position = found.end()
        return arguments, position


_KEYWORD = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*")
_PYTHON_NAMES = {"true": True, "false": False, "null": None}  # JSON's literals, which LFM2 writes too
_LITERAL_ENDS = re.compile(r"[,)\]}]")


def _keyword_arguments(text: str, position: int, separator: str) -> tuple[dict[str, Any], int] | None:
    """Keyword arguments from ``position`` (``key=value`` pairs, ``separator`` between two) and where they
    end, before the call's closing; None where the text is not such arguments."""
    arguments: dict[str, Any] = {}
    between = _pattern(separator)
    while True:
        if arguments:
            after = between.match(text, position)
            if after is None:
                return arguments, position
            position = after.end()
        keyword = _KEYWORD.match(text, position)
        if keyword is None:
            return (arguments, position) if not arguments else None
        literal = _literal_at(text, keyword.end())
        if literal is None:
            return None
        arguments[keyword[1]], position = literal


def _literal_at(text: str, position: int) -> tuple[Any, int] | None:
    """The JSON or Python literal at ``position`` and where it ends (JSON first: a Python reading of it
    would differ only for true/false/null, read as JSON's)."""
    value, end = json_at(text, position)
    if end >= 0:
        return value, end
    for close in _LITERAL_ENDS.finditer(text, position):  # the shortest text that is one literal
        piece = text[position:close.start()].strip()
        if piece in _PYTHON_NAMES:
            return _PYTHON_NAMES[piece], close.start()
        try:
            return ast.literal_eval(piece), close.start()
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
    return None


def _regex(literal: str) -> str:
    """A template's literal text as a pattern that lets the model's whitespace and numbers differ (a call's
    index, ``functions.name:0``) and takes any call id where the template wrote the probe's."""
    parts = []
    for piece in re.split(r"(\s+|\d+|" + "|".join(CALL_IDS) + ")", literal):
        if not piece:
            continue
        if piece.isspace():
            parts.append(r"\s*")
        elif piece in CALL_IDS:
            parts.append(r"[A-Za-z0-9_\-.:]+?")
        elif piece.isdigit():
            parts.append(r"\d+")
        else:
            parts.append(re.escape(piece))
    return "".join(parts)


def _pattern(literal: str | None) -> re.Pattern[str]:
    return re.compile(_regex(literal or ""), re.DOTALL)


def _matched_length(literal: str, text: str, position: int) -> int:
    found = _pattern(literal).match(text, position)
    return found.end() - position if found else 0


def json_at(text: str, position: int) -> tuple[Any, int]:
    """The JSON value at ``position`` (after blanks) and where it ends; -1 when there is none."""
    while position < len(text) and text[position].isspace():
        position += 1
    try:
        return _DECODER.raw_decode(text, position)
    except json.JSONDecodeError:
        return None, -1


def _at(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def decoded_arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        value, end = json_at(arguments, 0)
        return value if end == len(arguments.rstrip()) and isinstance(value, dict) else arguments
    return arguments
