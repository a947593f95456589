"""A final message continued rather than answered (a prefill, or ``continue_final_message``), written as
llama-server writes it: the messages before it are rendered without a generation prompt, then comes the
generation prompt (what asking for an answer adds), and where the template thinks, its thought is opened there
with the message's reasoning (cut back to before an opening the generation prompt already has) and, to go on
with the content, closed, then the message's content. Thinking tags come with the blanks the template writes
around a thought (llama.cpp's reasoning start and end: Qwen3's ``<think>\\n`` and ``\\n</think>\\n\\n``).
A template whose answers open with a recipient (Functionary v3.2's ``>>>all``) gets its answer's recipient."""

from __future__ import annotations

from enum import Enum
from typing import Any

from app.templating.chat_template import ChatTemplate
from app.templating.template_caps import ThinkingTags, common_prefix


class Continuation(Enum):
    """What of the final message goes on: its content (its thought closed first), or its reasoning."""

    CONTENT = "content"
    REASONING = "reasoning_content"


def continuation_mode(asked: bool | str | None, last: dict[str, Any]) -> Continuation:
    """llama-server's: ``continue_final_message`` "content" or "reasoning_content" as named; ``true`` or a prefill
    (``asked`` None), the reasoning where the message has only reasoning, else the content."""
    if asked in ("content", "reasoning_content"):
        return Continuation(asked)
    if last.get("reasoning_content") and not last.get("content"):
        return Continuation.REASONING
    return Continuation.CONTENT


def continued_prompt(template: ChatTemplate, head: list[dict[str, Any]], last: dict[str, Any], mode: Continuation,
                     tags: ThinkingTags | None, answer_prefix: str, tools: list[dict[str, Any]] | None,
                     kwargs: dict[str, Any]) -> str:
    """``head`` rendered, then the answer's start and what of ``last`` goes on. ``tags``: the template's thinking
    tags where it thinks; ``answer_prefix``: what an answer opens with after the generation prompt."""
    before = template.render(head, False, tools, kwargs)
    asked = template.render(head, True, tools, kwargs)
    opening = asked[common_prefix(before, asked):]
    if tags is not None:
        at = opening.find(tags.start)
        reasoning = str(last.get("reasoning_content") or "")
        unopened = tags.empty_thought_unopened and not reasoning and mode is Continuation.CONTENT
        opening = (opening if at < 0 else opening[:at]) + ("" if unopened else tags.start + reasoning)
        if mode is Continuation.CONTENT:
            opening += tags.end
    if mode is Continuation.CONTENT:
        opening += answer_prefix + str(last.get("content") or "")
    return before + opening
