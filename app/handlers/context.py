"""ServerContext: what the handlers share (settings, the engine, the chat template, start time)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.agent.toolbox import Toolbox
from app.config.settings import Settings
from app.engine import Engine, NotReadyError, SamplingParams
from app.engine.json_schema import schema_grammar
from app.handlers.preserved_tokens import template_tokens
from app.handlers.replies import ReplyForm, reply_form, reply_markup
from app.handlers.tools import format_markup, template_renders_tools
from app.protocol.api import Route
from app.protocol.metrics import MetricsExporter
from app.protocol.stream_sessions import StreamSessions
from app.templating.call_format import CallFormat
from app.templating.call_learning import learn_call_format
from app.templating.chat_template import ChatTemplate, choose_template
from app.templating.declared_formats import declared_call_format
from app.templating.dedicated import continuation_tags, declared_thinking_tags, reply_wrappers
from app.templating.template_caps import (
    THINK,
    ThinkingTags,
    analyse_thinking,
    template_caps,
)


@dataclass(frozen=True)
class AgentContext:
    """What agent mode's routes (/tools, /cors-proxy) read: the only part of the context a ``local`` route may
    read, so that a router serves them itself (``route_template``)."""

    toolbox: Toolbox | None = None  # None: /tools is off
    cors_proxy: bool = False


def agent_props(agent: AgentContext) -> dict[str, bool]:
    """What /props says of agent mode: llama-server's ``cors_proxy_enabled``, and this server's
    ``tools_enabled`` (whether ``GET /tools`` lists anything: the web UI asks it only then)."""
    return {"cors_proxy_enabled": agent.cors_proxy, "tools_enabled": agent.toolbox is not None}


@dataclass
class ServerContext:
    settings: Settings
    engine: Engine
    api_keys: tuple[str, ...] = ()
    started_at: float = field(default_factory=time.time)
    _template: ChatTemplate | None = None  # published once, by publish_loaded_model
    _caps: dict[str, bool] = field(default_factory=dict)
    _call_format: CallFormat | None = None  # the template's own tool-call format, learned with the caps
    _preserved_tokens: frozenset[int] = frozenset()  # special tokens of the template's markup, found with the caps
    _thinking_tags: ThinkingTags = THINK  # what opens and closes a thought in the template, with the caps
    _continuation_tags: ThinkingTags | None = None  # a continued message's thinking tags, with the caps
    _reply_form: ReplyForm = "tags"  # how a reply is read (app/handlers/replies.py), found with the caps
    _reply_wrappers: tuple[str, ...] = ()  # markup around an answer, left out of its content (Kimi K3's)
    _renders_tools: bool = False  # whether the template is given the tools (else a system message describes them)
    _thinks: bool = False  # whether the template thinks (--reasoning auto's enable_thinking)
    _default_grammar: str = ""  # --grammar, or --json-schema's grammar: published with the template
    metrics: MetricsExporter = field(init=False)
    routes: tuple[Route, ...] = ()  # the whole table as served (Vertex routes included)
    stream_sessions: StreamSessions = field(init=False)  # resumable streams
    agent: AgentContext = field(default_factory=AgentContext)

    def __post_init__(self) -> None:
        self.metrics = MetricsExporter(self.engine.stats)
        self.stream_sessions = StreamSessions(keyed=bool(self.api_keys))

    @property
    def model_path(self) -> str:
        """The file the engine loaded (a gs:// model's local copy), once it is loaded."""
        return self.engine.info.path

    @property
    def model_aliases(self) -> list[str]:
        if self.settings.alias:
            return sorted({name.strip() for name in self.settings.alias.split(",") if name.strip()})
        return []

    @property
    def model_name(self) -> str:
        """The served model id: the alphabetically first alias, else the file name."""
        aliases = self.model_aliases
        if aliases:
            return aliases[0]
        return self.model_path.rsplit("/", 1)[-1]

    def publish_loaded_model(self) -> None:
        """On the engine thread, once the model is loaded: build what the handlers share about it
        (the chat template, which needs the model's template and special tokens) and publish it
        with one assignment; it never changes afterwards (a reload after sleep is the same model).
        A template that cannot serve raises here, which fails the load."""
        info = self.engine.info
        choice = choose_template(self.settings.chat_template, self.settings.chat_template_file, info.chat_template,
                                 self.settings.jinja)
        template = ChatTemplate(choice, info.bos_token, info.eos_token, self._render_builtin)
        template.check()
        self._caps = {**template_caps(template), "jinja": choice.jinja_source is not None}
        self._call_format = ((learn_call_format(template) or declared_call_format(template.source))
                             if self._caps["supports_tools"] else None)
        self._renders_tools = template_renders_tools(template.source, self._call_format)
        thinking = analyse_thinking(template)  # its probes rendered once, for both answers
        self._thinks = thinking.thinks
        self._reply_form = reply_form(template.source)
        self._reply_wrappers = reply_wrappers(template.source)
        declared = declared_thinking_tags(template.source)
        self._thinking_tags = declared or thinking.tags or THINK
        self._continuation_tags = (continuation_tags(template.source) or declared
                                   or (thinking.tags if thinking.thinks else None))
        self._preserved_tokens = template_tokens(self.engine.vocab, (
            *format_markup(template.source, self._call_format), self._thinking_tags.open, self._thinking_tags.close,
            *reply_markup(self._reply_form)))
        self._default_grammar = self._server_grammar()
        unknown = info.outside_vocabulary([token for token, _ in self.settings.default_logit_bias])
        if unknown:
            raise ValueError(f"--logit-bias: token {unknown[0]} is outside the model's vocabulary of {info.n_vocab}")
        self._template = template

    def _server_grammar(self) -> str:
        """The grammar of requests that give none: --grammar's, or --json-schema's converted for
        this model (a schema that cannot be converted fails the load, saying so)."""
        source = self.settings.default_grammar_source()
        if source is None:
            return ""
        kind, value = source
        if kind == "grammar":
            return str(value)
        try:
            return schema_grammar(self.engine.vocab, value)
        except ValueError as exc:
            raise ValueError(f"--json-schema: the schema cannot be used: {exc}") from None

    @property
    def sampling_defaults(self) -> SamplingParams:
        """What a request gets for every sampling field it leaves out: the server's flags
        (``Settings.sampling_defaults``) and its default grammar."""
        return replace(self.settings.sampling_defaults, grammar=self._default_grammar)

    @property
    def chat_template_caps(self) -> dict[str, bool]:
        """/props ``chat_template_caps``: what the template renders (app/templating/template_caps.py), and
        whether it is Jinja (this server's addition; the web UI shows it)."""
        self.chat_template  # noqa: B018 (not ready until the template is published)
        return self._caps

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """What every chat gives the template before its own ``chat_template_kwargs``: enable_thinking, true
        where the template thinks (llama-server's ``--reasoning auto``), then the flags'
        (``ChatSettings.template_kwargs``: --reasoning on/off, --chat-template-kwargs)."""
        self.chat_template  # noqa: B018 (not ready until the template is published)
        return {"enable_thinking": self._thinks, **self.settings.template_kwargs}

    @property
    def reply_form(self) -> ReplyForm:
        """How replies are read: gpt-oss's channels, Muse Glimmer's or Functionary v3.2's recipients, or
        thinking tags (app/handlers/replies.py)."""
        self.chat_template  # noqa: B018 (not ready until the template is published)
        return self._reply_form

    @property
    def reply_wrappers(self) -> tuple[str, ...]:
        """The markup around an answer that the content leaves out (app/handlers/wrappers.py)."""
        self.chat_template  # noqa: B018 (not ready until the template is published)
        return self._reply_wrappers

    @property
    def continuation_tags(self) -> ThinkingTags | None:
        """The thinking tags a continued message's prompt opens (and closes) its thought with; None where the
        template does not think (app/templating/continuation.py)."""
        self.chat_template  # noqa: B018 (not ready until the template is published)
        return self._continuation_tags

    @property
    def thinking_tags(self) -> ThinkingTags:
        """What opens and closes a thought in the template's text (``<think>`` and ``</think>`` unless it shows
        others: app/templating/template_caps.py)."""
        self.chat_template  # noqa: B018 (not ready until the template is published)
        return self._thinking_tags

    @property
    def preserved_tokens(self) -> frozenset[int]:
        """The special tokens of the template's call markup and thinking tags, which a chat's generated text
        keeps (app/handlers/preserved_tokens.py)."""
        self.chat_template  # noqa: B018 (not ready until the template is published)
        return self._preserved_tokens

    @property
    def call_format(self) -> CallFormat | None:
        """How the template writes tool calls, where it renders tools and its calls can be learned
        (app/templating/call_learning.py) or are declared (app/templating/declared_formats.py); None
        otherwise."""
        self.chat_template  # noqa: B018 (not ready until the template is published)
        return self._call_format

    @property
    def renders_tools(self) -> bool:
        """Whether chats give the template their tools, found once with the call format (``template_renders_tools``)."""
        self.chat_template  # noqa: B018 (not ready until the template is published)
        return self._renders_tools

    @property
    def chat_template(self) -> ChatTemplate:
        if self._template is None:
            raise NotReadyError()
        return self._template

    def _render_builtin(self, template: str | None, messages: Sequence[tuple[str, str]], add_assistant: bool) -> str:
        """Through the vocabulary of the model loaded now: after an idle sleep the one the template
        was made with is freed (and llama.cpp reads the model's own template from it)."""
        return self.engine.vocab.apply_builtin_template(template, messages, add_assistant)
