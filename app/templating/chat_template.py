"""Chat prompts: the model's Jinja chat template (or llama.cpp's built-in formats with --no-jinja).

Templates are rendered in Jinja's sandbox with the helpers Hugging Face templates expect
(``raise_exception``, ``strftime_now``, a ``tojson`` that does not HTML-escape), and as llama.cpp's Jinja
renders them: transformers' ``{% generation %}`` blocks as their content, lists a template builds may be
appended to (Kimi K2 Thinking's call ids), ``safe`` leaves a string as it is.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import SandboxedEnvironment

from app.protocol.errors import InvalidRequestError
from app.templating.dedicated import generation_prompt_fix, message_shaper

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

BuiltinRenderer = Callable[[str | None, Sequence[tuple[str, str]], bool], str]


class TemplateError(Exception):
    """The configured chat template cannot be used (reported at start-up)."""


class GenerationBlocks(Extension):
    """``{% generation %}...{% endgeneration %}``: Hugging Face transformers' marks around what the assistant
    generated (for training masks). llama.cpp's Jinja ignores the tags and renders what is inside; so does
    this (LFM2.5's and Laguna's templates use them)."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise InvalidRequestError(f"the chat template rejected the messages: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def date_context() -> dict[str, str]:
    """Today's date as llama.cpp gives every Jinja template (``common_chat_extra_context``): Llama 3.x's
    ``date_string``, ``datetime``; a request's ``chat_template_kwargs`` win over them."""
    now = datetime.datetime.now()
    return {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y")}


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    """JSON of a value; an undefined one is null, as llama.cpp's Jinja writes it (Muse Glimmer's template writes a
    tool's ``description``, which a request may leave out)."""
    return json.dumps(value, ensure_ascii=False, indent=indent, default=_undefined_as_null)


def _undefined_as_null(value: Any) -> None:
    if isinstance(value, jinja2.Undefined):
        return None
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _LlamaUndefined(jinja2.Undefined):
    """An undefined variable added to a string is the string, as in llama.cpp's Jinja (Firefunction v2's
    ``suffix + "\\n" + functions`` without tools); anything else done with one fails as in Jinja's."""

    def __add__(self, other: Any) -> Any:
        return other if isinstance(other, str) else self._fail_with_undefined_error()

    def __radd__(self, other: Any) -> Any:
        return other if isinstance(other, str) else self._fail_with_undefined_error()


def _unmarked(value: Any) -> Any:
    """llama.cpp's ``safe``: the value as it is. Jinja's wraps it in Markup, and Markup + str escapes the str
    (Functionary's ``"Use the function '"|safe + name + ... + tool|tojson`` came out as ``&#34;name&#34;``)."""
    return value


def derived_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """What llama.cpp's Jinja sets from a chat's template arguments (common/jinja/caps.cpp): a boolean
    ``preserve_reasoning`` also as ``preserve_thinking`` and its opposite as ``clear_thinking``,
    ``truncate_history_thinking`` and ``drop_thinking`` (GLM's and DeepSeek V4's names for it), over any
    given; ``reasoning_effort`` also as ``reasoning_strength``."""
    derived = dict(arguments)
    preserve = derived.get("preserve_reasoning")
    if isinstance(preserve, bool):
        derived.update(preserve_thinking=preserve, clear_thinking=not preserve,
                       truncate_history_thinking=not preserve, drop_thinking=not preserve)
    effort = derived.get("reasoning_effort")
    if isinstance(effort, str) and effort:
        derived["reasoning_strength"] = effort
    return derived


def looks_like_jinja(text: str) -> bool:
    return "{%" in text or "{{" in text


def legacy_content(content: Any) -> str:
    """A message's content as llama.cpp's built-in (non-Jinja) templates take it: one string, the
    text parts of a list joined by newlines and the other parts left out, as llama-server does."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)]
        return "\n".join(texts)
    return str(content)


@dataclass(frozen=True)
class TemplateChoice:
    """Which template to use: Jinja source, or a llama.cpp built-in (``None`` = the model's)."""

    jinja_source: str | None
    builtin_name: str | None
    model_source: str = ""  # the model's own template, which llama.cpp's formatter reads when both are None


def choose_template(
    configured: str | None, configured_file: str | None, model_template: str | None, use_jinja: bool
) -> TemplateChoice:
    if configured_file:
        with open(configured_file, encoding="utf-8") as handle:
            configured = handle.read()
    if configured:
        if looks_like_jinja(configured):
            return TemplateChoice(configured, None)
        if configured == "chatml" and use_jinja:
            return TemplateChoice(CHATML, None)
        return TemplateChoice(None, configured)
    if use_jinja:
        return TemplateChoice(model_template or CHATML, None)
    return TemplateChoice(None, None if model_template else "chatml", model_template or "")


class ChatTemplate:
    """Renders a list of OpenAI-style messages into the model's prompt text."""

    def __init__(
        self,
        choice: TemplateChoice,
        bos_token: str,
        eos_token: str,
        builtin: BuiltinRenderer,
    ) -> None:
        self.choice = choice
        self._bos = bos_token
        self._eos = eos_token
        self._builtin = builtin
        self._template: jinja2.Template | None = None
        self._shape = message_shaper(choice.jinja_source) if choice.jinja_source is not None else None
        self._answer_opening = generation_prompt_fix(choice.jinja_source) if choice.jinja_source is not None else None
        if choice.jinja_source is not None:
            env = SandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", GenerationBlocks],
                undefined=_LlamaUndefined,
            )
            env.filters["tojson"] = _tojson
            env.filters["safe"] = _unmarked  # no Markup: "..."|safe + text would HTML-escape the text
            env.globals["raise_exception"] = _raise_exception
            env.globals["strftime_now"] = _strftime_now
            try:
                self._template = env.from_string(choice.jinja_source)
            except jinja2.TemplateError as exc:
                raise TemplateError(f"the chat template does not parse: {exc}") from None
        self.check()

    @property
    def source(self) -> str:
        return self.choice.jinja_source or self.choice.builtin_name or ""

    @property
    def published(self) -> str:
        """What /props names as the template, as llama-server: the source, or the built-in name, or
        (llama.cpp formatting the model's own template) the model's template text."""
        return self.source or self.choice.model_source

    def check(self) -> None:
        """Render a probe conversation, so that a broken template fails at start-up."""
        try:
            self.render([{"role": "user", "content": "hello"}], add_generation_prompt=True)
        except InvalidRequestError as exc:
            raise TemplateError(f"the chat template cannot render a plain conversation: {exc}") from None

    def render(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        if self._template is None:
            pairs = [(str(m["role"]), legacy_content(m.get("content"))) for m in messages]
            return self._builtin(self.choice.builtin_name, pairs, add_generation_prompt)
        context: dict[str, Any] = {**date_context(), **(extra or {})}
        context.update(
            messages=self._shape(messages) if self._shape is not None else messages,  # as llama-server's own code
            add_generation_prompt=add_generation_prompt,
            bos_token=self._bos,
            eos_token=self._eos,
        )
        if tools:
            context["tools"] = tools
        try:
            prompt = self._template.render(**context)
        except InvalidRequestError:
            raise
        except jinja2.TemplateError as exc:
            raise InvalidRequestError(f"the chat template failed on these messages: {exc}") from None
        except (TypeError, ValueError, KeyError, AttributeError, IndexError, ArithmeticError) as exc:
            raise InvalidRequestError(f"the chat template failed on these messages: {exc}") from None
        return self._answer_opening(prompt) if add_generation_prompt and self._answer_opening else prompt
