"""Tool-call formats that cannot be learned from their templates (app/templating/call_learning.py): the template
writes no calls in a history (LFM2, Granite 3.3), or writes them in a shape learning refuses (MiniMax M3's
closing tags repeat the key, Functionary v3.2's answers open as its calls do, Muse Glimmer names the function
twice). What their models write is declared here, found by the template's text as llama-server finds its
dedicated parsers (common/chat.cpp at the pinned llama.cpp).
"""

from __future__ import annotations

from app.templating.call_format import CallFormat
from app.templating.dedicated import is_functionary_v3_2, is_lfm2, is_muse_glimmer

# LFM2 and LFM2.5 (llama.cpp's parsers/lfm2.cpp): <|tool_call_start|>[get_weather(city="Paris"), ...]<|tool_call_end|>,
# Python-style keyword arguments
LFM2 = CallFormat("python", section_start="<|tool_call_start|>[", call_start="", name_end="(", call_end=")",
                  section_end="]<|tool_call_end|>", separator=", ", key_end="=", pair_separator=", ")

# Granite 3.3 (its system prompt: "respond only with <|tool_call|> followed by a JSON list of tools used"):
# <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]
GRANITE_3 = CallFormat("object", section_start="<|tool_call|>[", call_start="", name_end="", call_end="",
                       section_end="]", separator=", ", name_path=("name",), arguments_path=("arguments",))

# MiniMax M3 (llama.cpp's parsers/minimax-m3.cpp): every tag after its namespace token, each parameter tagged
# with its own name, <city>Paris</city>; its learning is refused, the closing tag repeating the key
MINIMAX_NAMESPACE = "]<]minimax[>["
MINIMAX_M3 = CallFormat("tagged", section_start=MINIMAX_NAMESPACE + "<tool_call>\n",
                        call_start=MINIMAX_NAMESPACE + '<invoke name="', name_end='">',
                        call_end=MINIMAX_NAMESPACE + "</invoke>", section_end="\n" + MINIMAX_NAMESPACE + "</tool_call>",
                        separator="\n", key_start=MINIMAX_NAMESPACE + "<", key_end=">",
                        value_end=MINIMAX_NAMESPACE + "</", key_closes_value=">")

# Functionary v3.2 (llama.cpp's parsers/functionary-v3-2.cpp): >>>get_weather\n{"city": "Paris"}, one message a
# call; its template writes calls so, but its answers open the same way (>>>all), which learning refuses
FUNCTIONARY_V3_2 = CallFormat("json", section_start="", call_start=">>>", name_end="\n", call_end="", section_end="",
                              separator="")

# Muse Glimmer (llama.cpp's parsers/muse-glimmer.cpp): an ATEM block in a message to the tool (its recipient,
# before the block, is read by app/handlers/harmony.py); the name written twice, which learning cannot take
MUSE_GLIMMER = CallFormat("tagged", section_start="", call_start='<atem:function_calls>\n<atem:invoke name="',
                          name_end='">\n', call_end="\n</atem:invoke>\n</atem:function_calls>", section_end="",
                          separator="", key_start='<atem:parameter name="', key_end='">',
                          value_end="</atem:parameter>", pair_separator="\n")  # one block a call, a message each


def declared_call_format(source: str) -> CallFormat | None:
    """The declared format of the template with this source, if it is one of them."""
    if is_lfm2(source):  # LFM2.5-Instruct: the same calls, its tool list without LFM2's special tokens
        return LFM2
    if "<|tool_call|>" in source and "JSON list of tools" in source:
        return GRANITE_3
    if MINIMAX_NAMESPACE in source and "<invoke name=" in source:
        return MINIMAX_M3
    if is_functionary_v3_2(source):
        return FUNCTIONARY_V3_2
    if is_muse_glimmer(source):
        return MUSE_GLIMMER
    return None
