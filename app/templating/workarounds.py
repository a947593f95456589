"""llama-server's workarounds on a chat's messages before its template renders them (common/chat.cpp's
``workaround`` namespace), in its order: StepFun 3.5's contents trimmed (leftover blanks drive that model into
reasoning loops), a developer message taken as a system one by every Jinja template but gpt-oss's (which has a
developer role of its own), and a system message merged into the next where the template takes no system role
(Gemma 2's refuses one). The shaping llama-server does for one template family alone is in dedicated.py."""

from __future__ import annotations

from typing import Any

from app.templating.dedicated import is_harmony

Messages = list[dict[str, Any]]

STEPFUN = "You have access to the following functions in JSONSchema format"  # how llama-server finds StepFun's
BLANKS = " \t\n\v\f\r"  # C's isspace, what llama.cpp's trim_whitespace trims


def jinja_workarounds(source: str, messages: Messages) -> Messages:
    """The workarounds llama-server applies before a Jinja template (``source``) renders ``messages``."""
    if STEPFUN in source:
        messages = [_trimmed(message) for message in messages]
    if not is_harmony(source):
        messages = [{**message, "role": "system"} if message.get("role") == "developer" else message
                    for message in messages]
    return messages


def _trimmed(message: dict[str, Any]) -> dict[str, Any]:
    """The message's text and reasoning without blanks around them (its parts are one text by now)."""
    return {key: value.strip(BLANKS) if key in ("content", "reasoning_content") and isinstance(value, str) else value
            for key, value in message.items()}


def merged_system_message(messages: Messages) -> Messages:
    """For a template that takes no system role (Gemma 2's refuses one), llama.cpp's workaround: the system
    message's text goes before the next message's, on a line of its own; a system message alone is left out."""
    if not messages or messages[0].get("role") != "system":
        return messages
    if len(messages) == 1:
        return []
    first, second = messages[0], messages[1]
    return [{**second, "content": f"{first.get('content') or ''}\n{second.get('content') or ''}"}, *messages[2:]]
