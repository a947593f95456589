"""A chat request from messages to choices: what OpenAI chat, OpenAI Responses and Anthropic
Messages share. ``prepare_chat`` renders and tokenizes the prompt and builds the engine request
(grammar for structured output or forced tool calls, log-probabilities, n); ``run_chat`` and
``chat_deltas`` turn engine events into content, reasoning and tool calls."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from app.engine import Completion, FinishReason, GenerationRequest, TokenChunk
from app.engine.types import MediaChunk, ReasoningBudget, TokenProbs
from app.handlers.context import ServerContext
from app.handlers.generation import JobGroup, Streamed
from app.handlers.media import SOURCE_FIELD, MediaItem, decode_base64, media_from_url, media_marker, tokenize_with_media
from app.handlers.params import ChatBody, ChatMessage, ContentPart, completions_count, generation_request, grammar_for
from app.handlers.prompt_log import log_prompt
from app.handlers.reasoning import FORMATS
from app.handlers.replies import ReplyForm, ReplyStream, answer_prefix, reply_stream, split_reply
from app.handlers.request_limits import check_media_count
from app.handlers.shapes import chunk_extras, finish_reason, probability_entries, probs_within_text
from app.handlers.tool_gate import ToolGate
from app.handlers.tools import (
    ToolCall,
    ToolPlan,
    call_grammar,
    messages_for_template,
    parse_tool_calls,
    plan_tools,
)
from app.handlers.wrappers import WrapperFilter, unwrapped
from app.protocol.api import Idle
from app.protocol.errors import InvalidRequestError
from app.templating.chat_template import derived_arguments
from app.templating.continuation import Continuation, continuation_mode, continued_prompt
from app.templating.workarounds import jinja_workarounds, merged_system_message


def _part_media(ctx: ServerContext, part: ContentPart, field: str) -> MediaItem | None:
    """The media item of an ``image_url``, ``input_audio``, ``input_video`` or ``video_url`` part (None for
    text parts)."""
    extra = part.model_extra or {}
    source = extra.get(SOURCE_FIELD)  # a part converted from another dialect names its own field
    if part.type == "image_url":
        image = extra.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str):
            raise InvalidRequestError(f"Field '{field}.image_url.url': required (a data: URI or a URL)")
        return media_from_url(ctx, url, str(source or f"{field}.image_url.url"))
    if part.type == "input_audio":
        audio = extra.get("input_audio")
        data = audio.get("data") if isinstance(audio, dict) else None
        if not isinstance(data, str):
            raise InvalidRequestError(f"Field '{field}.input_audio.data': required (base64 WAV or MP3)")
        return MediaItem.of(decode_base64(ctx, data, f"{field}.input_audio.data"), f"{field}.input_audio.data")
    if part.type in ("input_video", "video_url"):  # llama-server's, video_url as vLLM's name for it
        video = extra.get(part.type)
        key = next((name for name in ("data", "url") if isinstance(video, dict) and name in video), "url")
        url = video.get(key) if isinstance(video, dict) else video
        if not isinstance(url, str):
            raise InvalidRequestError(f"Field '{field}.{part.type}.url': required (a data: URI or a URL)")
        return media_from_url(ctx, url, f"{field}.{part.type}.{key}")
    if part.type not in ("text", "input_text", "output_text"):
        raise InvalidRequestError(f"Field '{field}': content part type {part.type!r} is not supported (text, "
                                  "image_url, input_audio, input_video and video_url are)")
    return None


def _text_of(ctx: ServerContext, message: ChatMessage, index: int, media: list[MediaItem]) -> str | None:
    """The message's text; each media part becomes the media marker, its item appended to ``media``."""
    if message.content is None or isinstance(message.content, str):
        return message.content
    texts = []
    for number, part in enumerate(message.content):
        item = _part_media(ctx, part, f"messages.{index}.content.{number}")
        if item is not None:
            media.append(item)
            check_media_count(len(media), "messages")
            texts.append(media_marker(ctx))
        else:
            texts.append(part.text or "")
    return "\n".join(texts)


def template_messages(ctx: ServerContext, body: ChatBody, media: list[MediaItem]) -> list[dict[str, Any]]:
    rendered = []
    for index, message in enumerate(body.messages):
        content = _text_of(ctx, message, index, media)
        if content is None and message.role != "assistant":
            raise InvalidRequestError(f"Field 'messages.{index}.content': required for role {message.role!r}")
        if content is None and message.role == "assistant" and not message.tool_calls:
            raise InvalidRequestError(f"Field 'messages.{index}': an assistant message needs content or tool_calls")
        item: dict[str, Any] = dict(message.model_extra or {})
        item.update(role=message.role, content=content or "")
        for key in ("name", "tool_calls", "tool_call_id", "reasoning_content"):
            value = getattr(message, key)
            if value is not None:
                item[key] = value
        rendered.append(item)
    return rendered


def render_prompt(ctx: ServerContext, body: ChatBody, plan: ToolPlan | None = None,
                  media: list[MediaItem] | None = None) -> tuple[str, Continuation | None]:
    """The chat rendered through the template, a media marker where each media part was (their
    items appended to ``media``), and what of the final message the model continues, if it does (a trailing
    assistant message is a prefill: app/templating/continuation.py) rather than start a new turn."""
    template = ctx.chat_template
    renders_tools = ctx.renders_tools
    collected = media if media is not None else []
    messages = messages_for_template(template_messages(ctx, body, collected), plan, renders_tools,
                                     ctx.chat_template_caps.get("supports_object_arguments", True))
    if template.choice.jinja_source is not None:
        messages = jinja_workarounds(template.source, messages)
    if not ctx.chat_template_caps.get("supports_system_role", True):
        messages = merged_system_message(messages)
    tools = [tool.model_dump(exclude_none=True) for tool in plan.tools] if plan and renders_tools else None
    kwargs = derived_arguments({**ctx.template_kwargs, **(body.chat_template_kwargs or {}),
                                **_effort(body.reasoning_effort or ctx.settings.reasoning_effort)})
    mode = _continues(body, messages, ctx.settings.prefill_assistant)
    if mode is None:
        return template.render(messages, body.add_generation_prompt, tools, kwargs), None
    if not messages or messages[-1]["role"] != "assistant":  # a user's message goes on in its own turn
        return template.render(messages, False, tools, kwargs), None
    return continued_prompt(template, messages[:-1], messages[-1], mode,
                            ctx.continuation_tags, answer_prefix(ctx.reply_form), tools, kwargs), mode


def _effort(effort: str | None) -> dict[str, Any]:
    """``reasoning_effort`` as llama-server passes it to the template; ``none`` turns thinking off."""
    if effort == "none":
        return {"enable_thinking": False}
    return {"reasoning_effort": effort} if effort else {}


def reasoning_budget(ctx: ServerContext, body: ChatBody, opened: bool) -> ReasoningBudget | None:
    """The request's reasoning budget (``reasoning_budget_tokens``, ``thinking_budget_tokens``, else
    ``--reasoning-budget``), or None when there is no budget and no ``reasoning_control``."""
    tokens = next((value for value in (body.reasoning_budget_tokens, body.thinking_budget_tokens)
                   if value is not None and value != -1), ctx.settings.reasoning_budget)
    if tokens < 0 and not body.reasoning_control:
        return None
    vocab, tags = ctx.engine.vocab, ctx.thinking_tags
    end = tuple(vocab.tokenize(tags.close, False, True))
    message = body.reasoning_budget_message if body.reasoning_budget_message is not None else (
        ctx.settings.reasoning_budget_message or "")
    forced = tuple(vocab.tokenize(message, False, True)) + end if message else end
    return ReasoningBudget(start=tuple(vocab.tokenize(tags.open, False, True)), ends=(end,), forced=forced,
                           tokens=tokens, opened=opened)


def _continues(body: ChatBody, messages: list[dict[str, Any]], prefill: bool) -> Continuation | None:
    """Whether and how the final message is continued rather than answered, as llama-server decides: asked by
    ``continue_final_message`` (with ``add_generation_prompt`` false), or a trailing assistant message
    (a prefill, unless --no-prefill-assistant); never one with tool calls."""
    asked = body.continue_final_message is True or body.continue_final_message in ("content", "reasoning_content")
    last: dict[str, Any] = messages[-1] if messages else {}  # no messages: an assistant turn from nothing
    prefilled = not asked and last.get("role") == "assistant" and prefill
    if prefilled and len(messages) > 1 and messages[-2]["role"] == "assistant":
        raise InvalidRequestError("Field 'messages': cannot have two assistant messages at the end")
    if asked and body.add_generation_prompt:
        raise InvalidRequestError("Field 'continue_final_message': cannot set both add_generation_prompt and "
                                  "continue_final_message to true (set add_generation_prompt to false)")
    if (asked or prefilled) and last.get("role") == "assistant" and last.get("tool_calls"):
        raise InvalidRequestError("Field 'continue_final_message': cannot continue an assistant message that "
                                  "contains tool calls")
    if not (asked or prefilled):
        return None
    return continuation_mode(body.continue_final_message if asked else None, last)


def _format_schema(body: ChatBody) -> tuple[bool, Any]:
    """(structured output wanted, its JSON schema) from ``response_format``."""
    fmt = body.response_format
    if fmt is None or fmt.type == "text":
        return False, None
    if fmt.type == "json_object":
        return True, fmt.schema_ if fmt.schema_ is not None else {"type": "object"}
    if fmt.type == "json_schema":
        if fmt.json_schema is None or fmt.json_schema.schema_ is None:
            if fmt.schema_ is not None:
                return True, fmt.schema_
            raise InvalidRequestError("Field 'response_format.json_schema.schema': a JSON schema is required")
        return True, fmt.json_schema.schema_
    raise InvalidRequestError(
        f'Field \'response_format\': type must be one of "text", "json_object" or "json_schema", '
        f"but got: {fmt.type}"
    )


@dataclass(frozen=True)
class PreparedChat:
    prompt_text: str
    request: GenerationRequest
    copies: int
    plan: ToolPlan | None
    reasoning_format: str
    opened_thinking: bool
    continued: Continuation | None
    top_logprobs: int | None
    parse_calls: bool = True  # tool calls are parsed out of the text (not with --skip-chat-parsing)
    reply_form: ReplyForm = "tags"  # how the reply is read (app/handlers/replies.py)
    reply_wrappers: tuple[str, ...] = ()  # markup around the answer left out of its content (app/handlers/wrappers.py)

    @property
    def n_prompt(self) -> int:
        return len(self.request.prompt)


@dataclass(frozen=True)
class ChatPrompt:
    text: str
    tokens: list[int]  # media rows as placeholders
    media: tuple[MediaChunk, ...]
    plan: ToolPlan | None
    continued: Continuation | None  # what of the final message the model continues


def tool_plan(ctx: ServerContext, body: ChatBody) -> ToolPlan | None:
    """What the request's tools mean with this template (its call format: ``ServerContext.call_format``)."""
    return plan_tools(body.tools, body.tool_choice, body.parallel_tool_calls, ctx.chat_template.source,
                      ctx.call_format)


def chat_prompt_tokens(ctx: ServerContext, body: ChatBody) -> ChatPrompt:
    plan = tool_plan(ctx, body)
    media: list[MediaItem] = []
    text, continued = render_prompt(ctx, body, plan, media)
    tokens, chunks = tokenize_with_media(ctx, text, media)
    return ChatPrompt(text, tokens, chunks, plan, continued)


def prepare_chat(ctx: ServerContext, body: ChatBody) -> PreparedChat:
    if body.top_logprobs is not None and not body.logprobs:
        raise InvalidRequestError("Field 'top_logprobs': requires 'logprobs' to be true")
    reasoning_format = body.reasoning_format or ctx.settings.reasoning_format
    if reasoning_format not in FORMATS:
        raise InvalidRequestError(f"Field 'reasoning_format': must be one of {', '.join(FORMATS)}")
    if ctx.settings.skip_chat_parsing:  # the whole output is content (llama-server's pure content parser)
        reasoning_format = "none"
    prompt = chat_prompt_tokens(ctx, body)
    text, plan = prompt.text, prompt.plan
    structured, schema = _format_schema(body)
    if structured and body.json_schema is not None:
        raise InvalidRequestError("Field 'response_format': give either response_format or json_schema, not both")
    grammar = grammar_for(ctx, body.grammar, schema if structured else body.json_schema,
                          "response_format.json_schema.schema" if structured else "json_schema")
    opened = text.rstrip().endswith(ctx.thinking_tags.open) or prompt.continued is Continuation.REASONING
    if plan is not None and body.grammar is not None:  # as llama-server: tools that may be called take no grammar
        raise InvalidRequestError("Field 'grammar': a custom grammar cannot be combined with tools "
                                  "(unless tool_choice is none)")
    if plan is not None and plan.forced is not None:
        if grammar:
            raise InvalidRequestError(f"Field '{'response_format' if structured else 'json_schema'}': a schema "
                                      "cannot be combined with forced tool calls")
        grammar = call_grammar(plan, ctx.engine.vocab, ctx.thinking_tags.close if opened else None)
    top = body.top_logprobs if body.logprobs else None
    n_probs = max(1, top or 0) if body.logprobs else None
    request = generation_request(ctx, body, prompt.tokens, grammar, n_probs, prompt.media, ctx.preserved_tokens)
    request = replace(request, reasoning=reasoning_budget(ctx, body, opened))
    return PreparedChat(
        prompt_text=text,
        request=request,
        copies=completions_count(body),
        plan=plan,
        reasoning_format=reasoning_format,
        opened_thinking=opened,
        continued=prompt.continued,
        top_logprobs=top,
        parse_calls=not ctx.settings.skip_chat_parsing,
        reply_form="tags" if ctx.settings.skip_chat_parsing else ctx.reply_form,
        reply_wrappers=() if ctx.settings.skip_chat_parsing else ctx.reply_wrappers,
    )


@dataclass(frozen=True)
class ChatChoice:
    index: int
    content: str
    reasoning: str | None
    tool_calls: list[ToolCall]
    finish_reason: str
    completion: Completion
    logprobs: list[dict[str, Any]] | None

    @property
    def stop_word(self) -> str | None:
        return self.completion.stopping_word or None


def _logprob_entries(ctx: ServerContext, prepared: PreparedChat, probs: tuple[TokenProbs, ...]
                     ) -> list[dict[str, Any]] | None:
    if prepared.top_logprobs is None and prepared.request.sampling.n_probs == 0:
        return None
    entries = probability_entries(ctx.engine.vocab, probs, False)
    keep = prepared.top_logprobs or 0
    for entry in entries:
        entry["top_logprobs"] = entry["top_logprobs"][:keep]
    return entries


def finish_choice(ctx: ServerContext, prepared: PreparedChat, index: int, result: Completion) -> ChatChoice:
    split = split_reply(prepared.reply_form, result.text, prepared.reasoning_format, prepared.opened_thinking,
                        ctx.thinking_tags, ctx.call_format, prepared.continued)
    content, calls = split.content, list[ToolCall]()
    if prepared.plan is not None and prepared.parse_calls:
        content, calls = parse_tool_calls(content, prepared.plan)
    content = unwrapped(content, prepared.reply_wrappers)
    reason = "tool_calls" if calls and result.finish is not FinishReason.LIMIT else finish_reason(result)
    return ChatChoice(
        index=index,
        content=content,
        reasoning=split.reasoning,
        tool_calls=calls,
        finish_reason=reason,
        completion=result,
        logprobs=_logprob_entries(ctx, prepared, probs_within_text(ctx.engine.vocab, result)),
    )


def run_chat(ctx: ServerContext, prepared: PreparedChat, should_stop: Callable[[], bool]) -> list[ChatChoice]:
    results = submit_chat(ctx, prepared).results(should_stop)
    return [finish_choice(ctx, prepared, index, result) for index, result in enumerate(results)]


@dataclass
class ChatDelta:
    index: int
    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[dict[str, Any]] | None = None
    choice: ChatChoice | None = None
    extras: dict[str, Any] = field(default_factory=dict)  # timings, prompt_progress (app/handlers/shapes.py)
    progress: bool = False  # a prompt-progress event: no text


def submit_chat(ctx: ServerContext, prepared: PreparedChat) -> JobGroup:
    log_prompt(ctx.settings.log_prompts_dir, prepared.prompt_text)
    return JobGroup(ctx.engine, [prepared.request], prepared.copies)


def chat_deltas(ctx: ServerContext, prepared: PreparedChat, stream: Iterator[Streamed | Idle],
                progress: bool = False) -> Iterator[ChatDelta | Idle]:
    """A chat's stream as reasoning and content pieces as they come; tool calls once complete.
    Prompt-progress events become deltas of their own where the dialect shows them (``progress``)."""
    splitters: dict[int, ReplyStream] = {}
    gates: dict[int, ToolGate] = {}
    filters: dict[int, WrapperFilter] = {}
    for item in stream:
        if isinstance(item, Idle):
            yield item
            continue
        index, event = item.index, item.event
        if index not in splitters:
            splitters[index] = reply_stream(prepared.reply_form, prepared.reasoning_format, prepared.opened_thinking,
                                            ctx.thinking_tags, ctx.call_format, prepared.continued)
        splitter = splitters[index]
        gate = gates.setdefault(index, ToolGate(prepared.plan if prepared.parse_calls else None))
        unwrap = filters.setdefault(index, WrapperFilter(prepared.reply_wrappers))
        if isinstance(event, TokenChunk):
            if event.progress is not None:
                if progress:
                    yield ChatDelta(index, extras=chunk_extras(event), progress=True)
                continue
            reasoning, content = splitter.feed(event.text)
            yield ChatDelta(index, reasoning, unwrap.feed(gate.feed(content)),
                            logprobs=_logprob_entries(ctx, prepared, event.probs), extras=chunk_extras(event))
            continue
        reasoning, content = splitter.feed("", final=True)
        released = gate.feed(content)
        held = gate.held
        content = released + gate.release()
        choice = finish_choice(ctx, prepared, index, event)
        if gate.buffering and gate.streamed:  # an answer, then what may be a call: the answer has streamed
            content = released + ("" if choice.tool_calls else held)
        elif gate.buffering:  # held from the start: the parsed answer beside the calls, or the whole reply
            content = choice.content
        content = unwrap.feed(content, final=True)
        yield ChatDelta(index, reasoning, content, tool_calls=choice.tool_calls, choice=choice)
