"""Chat templates, reasoning, and the media a prompt may carry."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.config.options import FALSE, TRUE, SettingsError, option


@dataclass(frozen=True)
class ChatSettings:
    """Chat templates, reasoning, and the media a prompt may carry."""

    chat_template_kwargs: str | None = option(("--chat-template-kwargs",), "str", None,
        "default arguments of the chat template, a JSON object (a request's own chat_template_kwargs add to "
        "them and win)", env="LLAMA_ARG_CHAT_TEMPLATE_KWARGS", metavar="JSON")
    jinja: bool = option(("--jinja",), "bool", True,
        "render chat with the model's Jinja template (--no-jinja: llama.cpp's built-in templates)",
        env="LLAMA_ARG_JINJA", negative_flags=("--no-jinja",))
    chat_template: str | None = option(("--chat-template",), "str", None,
        "chat template: a built-in name (chatml) or Jinja source", env="LLAMA_ARG_CHAT_TEMPLATE",
        metavar="JINJA")
    chat_template_file: str | None = option(("--chat-template-file",), "str", None,
        "file holding a Jinja chat template", env="LLAMA_ARG_CHAT_TEMPLATE_FILE", metavar="FNAME")
    reasoning_format: str = option(("--reasoning-format",), "choice", "auto",
        "how <think> text is returned: auto/deepseek (split into reasoning_content), deepseek-legacy "
        "(split and kept in the content), none (left in the content)", env="LLAMA_ARG_THINK",
        choices=("auto", "none", "deepseek", "deepseek-legacy"))
    reasoning: str = option(("-rea", "--reasoning"), "str", "auto",
        "thinking in chats: off gives the template enable_thinking = false, on gives it true, auto gives it true "
        "where the template thinks (its reasoning shows between markers, or enable_thinking opens or closes its "
        "think block), as llama-server's chat analysis finds",
        env="LLAMA_ARG_REASONING", metavar="[on|off|auto]")
    reasoning_effort: str | None = option(("--reasoning-effort",), "str", None,
        "the default reasoning_effort of chats (a template argument, e.g. low, medium, high; none: no thinking)",
        env="LLAMA_ARG_REASONING_EFFORT", metavar="EFFORT")
    reasoning_budget: int = option(("--reasoning-budget",), "int", -1,
        "tokens a chat may think before its end of thinking is forced in (-1: no limit, 0: none); a request's "
        "reasoning_budget_tokens wins", env="LLAMA_ARG_THINK_BUDGET", minimum=-1, metavar="N")
    reasoning_budget_message: str | None = option(("--reasoning-budget-message",), "str", None,
        "text put before the forced end of thinking", env="LLAMA_ARG_THINK_BUDGET_MESSAGE", metavar="MESSAGE")
    reasoning_preserve: bool = option(("--reasoning-preserve",), "bool", True,
        "keep the reasoning of every assistant message in the history, not just the last (the template's "
        "preserve_reasoning, and its other names: drop_thinking, clear_thinking, ...; on by default, as in "
        "llama-server)", env="LLAMA_ARG_REASONING_PRESERVE",
        negative_flags=("--no-reasoning-preserve",))
    skip_chat_parsing: bool = option(("--skip-chat-parsing",), "bool", False,
        "leave the model's whole output in the content: no reasoning split and no tool calls parsed",
        env="LLAMA_ARG_SKIP_CHAT_PARSING", negative_flags=("--no-skip-chat-parsing",))
    prefill_assistant: bool = option(("--prefill-assistant",), "bool", True,
        "a trailing assistant message is continued by the model (a prefill); --no-prefill-assistant: it is a "
        "whole message and the model answers after it", env="LLAMA_ARG_PREFILL_ASSISTANT",
        negative_flags=("--no-prefill-assistant",))
    media_path: str | None = option(("--media-path",), "str", None,
        "the directory file:// media in requests may come from (default: file:// is refused)",
        env="LLAMA_ARG_MEDIA_PATH", metavar="DIR")
    media_urls: bool = option(("--media-urls",), "bool", False,
        "fetch http(s) image and audio URLs given in requests (default: only data: URIs and --media-path files)",
        env="LLAMA_ARG_MEDIA_URLS", negative_flags=("--no-media-urls",))
    media_urls_private: bool = option(("--media-urls-private",), "bool", False,
        "with --media-urls, also fetch from loopback and private addresses (default: public addresses only; "
        "link-local, the metadata server's, never)", env="LLAMA_ARG_MEDIA_URLS_PRIVATE")
    media_max_bytes: int = option(("--media-max-bytes",), "int", 20 * 1024 * 1024,
        "largest media item a request may give or a URL may return", env="LLAMA_ARG_MEDIA_MAX_BYTES", minimum=1)
    media_max_pixels: int = option(("--media-max-pixels",), "int", 50_000_000,
        "the most pixels an image may declare (width x height, read from its header before it is decoded), "
        "and a video's frames together (at --video-fps, measured by ffprobe before they are decoded); 0: no "
        "limit", env="LLAMA_ARG_MEDIA_MAX_PIXELS", minimum=0)
    media_max_seconds: float = option(("--media-max-seconds",), "float", 600.0,
        "the longest audio or video item, in seconds (read from its header before it is decoded; 0: no limit)",
        env="LLAMA_ARG_MEDIA_MAX_SECONDS", minimum=0)
    media_marker: str | None = option(("--media-marker",), "str", None,
        "the text that stands for a media item in prompts and prompt_string (default: random per start, as "
        "llama-server's; /props reports it)", env="LLAMA_MEDIA_MARKER", metavar="TEXT")

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """The template's default arguments from the flags: enable_thinking with --reasoning on or off (auto
        leaves it to the template: ``ServerContext.template_kwargs``), --reasoning-preserve as
        preserve_reasoning, then --chat-template-kwargs (checked to be a JSON object at start-up)."""
        kwargs: dict[str, Any] = {}
        if self.reasoning.strip().lower() in TRUE | FALSE:
            kwargs["enable_thinking"] = self.reasoning.strip().lower() in TRUE
        kwargs["preserve_reasoning"] = self.reasoning_preserve
        return kwargs | (dict(json.loads(self.chat_template_kwargs)) if self.chat_template_kwargs else {})

    def check(self) -> None:
        """--chat-template-kwargs is a JSON object, --reasoning a switch, and one template is given."""
        if self.chat_template_kwargs is not None:
            try:
                parsed = json.loads(self.chat_template_kwargs)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                raise SettingsError(
                    "--chat-template-kwargs: must be a JSON object, e.g. '{\"enable_thinking\": false}'")
        if self.reasoning.strip().lower() not in TRUE | FALSE | {"auto", "-1"}:
            raise SettingsError(f"--reasoning: invalid value {self.reasoning!r} (expected on, off or auto)")
        if self.chat_template and self.chat_template_file:
            raise SettingsError("--chat-template and --chat-template-file cannot be used together")
