"""Templates that llama-server gives code of their own (common/chat.cpp's specialized templates, found by their
text as it finds them): how it shapes their messages before rendering (gpt-oss's and LFM2's read an answer's
reasoning as ``thinking``; Ministral 3's, and any template llama-server takes for one, Devstral's, take a system
or assistant message's content as blocks, a thinking block first; an older Gemma 4 template's take a call's
results in its assistant message), the thinking tags it declares for those
whose tags the template's rendering does not show as a pair (gpt-oss's analysis channel, Gemma 4's thought
channel, Kimi K3's think tag), and the markup around an answer it reads past (Kimi K3's response tags)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from app.templating.template_caps import ThinkingTags

Messages = list[dict[str, Any]]


def is_harmony(source: str) -> bool:
    """gpt-oss's channels."""
    return "<|channel|>" in source


def is_lfm2(source: str) -> bool:
    """LFM2's tool list in its special tokens, or LFM2.5's without them."""
    return ("<|tool_list_start|>" in source and "<|tool_list_end|>" in source) or "List of tools: [" in source


def is_muse_glimmer(source: str) -> bool:
    """Muse Glimmer's recipients (to=self, to=user, to=a tool) and ATEM calls."""
    return "<atem:function_calls>" in source and "<|eom|>" in source


def is_functionary_v3_2(source: str) -> bool:
    """Functionary v3.2's recipients: ``>>>all`` for the answer, ``>>>name`` for a call."""
    return ">>>all" in source and ">>>${recipient}" in source


def is_kimi_k3(source: str) -> bool:
    """Kimi K3's XTML: <|open|>tag<|sep|> ... <|close|>tag<|sep|>."""
    return all(marker in source for marker in ("<|open|>", "<|close|>", "<|end_of_msg|>"))


def reply_wrappers(source: str) -> tuple[str, ...]:
    """The markup around an answer that llama-server's parser for the template reads past (Kimi K3's response
    and message tags): left out of the content."""
    if is_kimi_k3(source):
        return ("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>", "<|end_of_msg|>")
    return ()


def is_gemma_4(source: str) -> bool:
    return "'<|tool_call>call:'" in source


def declared_thinking_tags(source: str) -> ThinkingTags | None:
    """The thinking tags llama-server declares for the template with this source; None: found as any
    template's are (``analyse_thinking``)."""
    if is_harmony(source):  # the final channel's header follows the analysis
        return ThinkingTags("<|channel|>analysis<|message|>", "<|end|>",
                            written_close="<|end|><|start|>assistant<|channel|>final<|message|>")
    if is_gemma_4(source):
        return ThinkingTags("<|channel>thought", "<channel|>", written_open="<|channel>thought\n")
    if is_kimi_k3(source):  # the response's tag follows the thought
        return ThinkingTags("<|open|>think<|sep|>", "<|close|>think<|sep|>",
                            written_close="<|close|>think<|sep|><|open|>response<|sep|>")
    return None


def is_qwen3_coder_family(source: str) -> bool:
    """Qwen3-Coder's XML calls, with newlines between the tags (also Qwen3.5's, Nemotron Nano 3's, StepFun 3.5's)."""
    return (all(tag in source for tag in ("<tool_call>", "<function=", "<parameter="))
            and "'<tool_call><function=' ~ tool_call.name ~ '>'" not in source)


def continuation_tags(source: str) -> ThinkingTags | None:
    """The thinking tags a continued message's prompt is written with (app/templating/continuation.py) where
    llama-server's own code for the template, or a patch of its template analysis, declares them; None: the
    template's own, where it thinks. Muse Glimmer's: its message to self, then the one to the user; DeepSeek
    V4's, a thought without reasoning written as ``</think>`` alone; Ministral 3's (and Devstral's) ``[THINK]``;
    Cohere2 MoE's, with its text tag after the thought; Qwen3-Coder's family, where it thinks, ``<think>`` and
    ``</think>`` on lines of their own; Nemotron Nano v2's ``<think>`` and a newline; Kimi K2's, LFM2's, Granite
    3.3's, Laguna's and the older Qwen and DeepSeek R1 templates' (which split a history's answers at
    ``</think>``): the bare ``<think>`` and ``</think>``."""
    if is_muse_glimmer(source):
        return ThinkingTags("to=self<|message|>", "<|eom|>", " to=self<|message|>",
                            "<|eom|><|start|>assistant to=user<|message|>")
    if all(marker in source for marker in ("dsml_token", "DSML")) and "function_calls" not in source:
        return ThinkingTags(empty_thought_unopened=True)  # DeepSeek V4's: a thought without reasoning is </think>
    if is_ministral_3(source):  # Devstral's too, which llama-server takes for one
        return ThinkingTags("[THINK]", "[/THINK]")
    if "<|START_TEXT|>" in source and "<|START_ACTION|>" in source:  # Cohere2 MoE: the answer's text tag after
        return ThinkingTags("<|START_THINKING|>", "<|END_THINKING|>",
                            written_close="<|END_THINKING|><|START_TEXT|>")
    if is_qwen3_coder_family(source) and "<think>" in source:  # Qwen3.5's, Nemotron Nano 3's, StepFun 3.5's
        return ThinkingTags(written_open="<think>\n", written_close="\n</think>\n\n")
    if all(marker in source for marker in ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<TOOL_RESPONSE>")):
        return ThinkingTags(written_open="<think>\n")
    older_qwen_or_r1 = ("content.split('</think>')" in source and "reasoning_content" not in source
                        and "<SPECIAL_12>" not in source)
    if (older_qwen_or_r1 or is_lfm2(source) or "laguna_glm_thinking" in source
            or ("<|tool_calls_section_begin|>" in source and "<|tool_call_begin|>" in source)
            or "Write your thoughts between <think></think> and write your response between" in source):
        return ThinkingTags()
    return None


def is_ministral_3(source: str) -> bool:
    """Ministral 3 and Magistral: Mistral's tags without Mistral Small 3.2's [CALL_ID]."""
    return all(tag in source for tag in ("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]")) and "[CALL_ID]" not in source


def generation_prompt_fix(source: str) -> Callable[[str], str] | None:
    """What llama-server adds to a prompt that asks for an answer, for the template with this source; None:
    nothing. Gemma 4's templates open no model turn after a tool's results when the calling message had text
    (the prompt ends with ``<turn|>``): llama-server opens it, else the model answers outside a turn."""
    if is_gemma_4(source):
        return lambda prompt: prompt + "<|turn>model\n" if prompt.endswith("<turn|>\n") else prompt
    return None


def is_older_gemma_4(source: str) -> bool:
    """A Gemma 4 template from before its OpenAI-style tool messages: it reads a call's results from the
    assistant message's ``tool_responses``."""
    return is_gemma_4(source) and "{#- OpenAI Chat Completions:" not in source


def message_shaper(source: str) -> Callable[[Messages], Messages] | None:
    """How the messages are shaped for the template with this source; None: as they are."""
    if is_older_gemma_4(source):
        return _tool_responses_in_turns
    if is_harmony(source):
        return lambda messages: [_with_thinking(message, True) for message in messages]
    if is_lfm2(source):
        return lambda messages: [_with_thinking(message, False) for message in messages]
    if is_ministral_3(source):
        return lambda messages: [_as_blocks(message) for message in messages]
    return None


def _with_thinking(message: dict[str, Any], calls_drop_content: bool) -> dict[str, Any]:
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        return message
    shaped = {**message, "thinking": reasoning}
    if calls_drop_content and message.get("tool_calls"):  # gpt-oss: a call after a thought has no content
        shaped.pop("content", None)
    return shaped


def _as_blocks(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("role") not in ("system", "assistant"):
        return message
    blocks: list[Any] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        blocks.append({"type": "thinking", "thinking": reasoning})
    content = message.get("content")
    if isinstance(content, str):
        blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        blocks.extend(content)
    shaped = {key: value for key, value in message.items() if key != "reasoning_content"}
    shaped["content"] = blocks
    return shaped


def _tool_responses_in_turns(messages: Messages) -> Messages:
    """llama-server's Gemma 4 workaround: an assistant message with calls, the tool messages after it and a
    plain answer after those become one assistant message, with the results as ``tool_responses`` (``name``:
    the call's at the same place, else the tool_call_id; ``response``: the content as JSON where it parses)
    and the answer as its content (the calling message's own content is left out, as there)."""
    shaped: Messages = []
    at = 0
    while at < len(messages):
        message = messages[at]
        at += 1
        calls = message.get("tool_calls")
        if message.get("role") != "assistant" or not isinstance(calls, list) or not calls:
            shaped.append(message)
            continue
        turn: dict[str, Any] = {"role": "assistant", "tool_calls": calls}
        responses: Messages = []
        while at < len(messages) and messages[at].get("role") == "tool":
            name = calls[len(responses)].get("function", {}).get("name", "") if len(responses) < len(calls) else ""
            responses.append({"name": name or messages[at].get("tool_call_id", ""),
                              "response": _response(messages[at].get("content"))})
            at += 1
        if responses:
            turn["tool_responses"] = responses
        answer = messages[at] if at < len(messages) else {}
        if answer.get("role") == "assistant" and not answer.get("tool_calls") and answer.get("content"):
            turn["content"] = answer["content"]
            at += 1
        if isinstance(message.get("reasoning_content"), str):
            turn["reasoning_content"] = message["reasoning_content"]
        shaped.append(turn)
    return shaped


def _response(content: Any) -> Any:
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content
