"""Tool-call formats of templates that render tools but write no calls of their own in a history, so nothing
can be learned from them (app/templating/call_learning.py): what their models write is declared here, found
by the template's text as llama-server finds its dedicated parsers (common/chat.cpp at the pinned llama.cpp).
"""

from __future__ import annotations

from app.templating.call_format import CallFormat

# LFM2 and LFM2.5 (llama.cpp's parsers/lfm2.cpp): <|tool_call_start|>[get_weather(city="Paris"), ...]<|tool_call_end|>,
# Python-style keyword arguments
LFM2 = CallFormat("python", section_start="<|tool_call_start|>[", call_start="", name_end="(", call_end=")",
                  section_end="]<|tool_call_end|>", separator=", ", key_end="=", pair_separator=", ")

# Granite 3.3 (its system prompt: "respond only with <|tool_call|> followed by a JSON list of tools used"):
# <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]
GRANITE_3 = CallFormat("object", section_start="<|tool_call|>[", call_start="", name_end="", call_end="",
                       section_end="]", separator=", ", name_path=("name",), arguments_path=("arguments",))


def declared_call_format(source: str) -> CallFormat | None:
    """The declared format of the template with this source, if it is one of them."""
    if "<|tool_list_start|>" in source and "<|tool_list_end|>" in source:
        return LFM2
    if "List of tools: [" in source:  # LFM2.5: the same calls, the tool list without its special tokens
        return LFM2
    if "<|tool_call|>" in source and "JSON list of tools" in source:
        return GRANITE_3
    return None
