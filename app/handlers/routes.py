"""ROUTES: llama-server's endpoint table, as data, in registration order.

The Flask rules and the Vertex ``@requestFormat`` aliases are both generated from this table.
Path parameters use llama-server's ``:name`` syntax.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from pydantic import BaseModel

from app.config.settings import Settings
from app.handlers.anthropic import MessagesBody, post_count_tokens, post_messages
from app.handlers.chat import (
    ControlBody,
    post_apply_template,
    post_chat_completions,
    post_chat_control,
    post_chat_input_tokens,
)
from app.handlers.completions import CompletionBody, post_completion, post_openai_completions
from app.handlers.context import AgentContext, ServerContext
from app.handlers.cors_proxy import get_cors_proxy, post_cors_proxy
from app.handlers.embeddings import (
    NativeEmbeddingBody,
    OpenAIEmbeddingBody,
    RerankBody,
    post_embedding,
    post_openai_embeddings,
    post_rerank,
)
from app.handlers.infill import InfillBody, post_infill
from app.handlers.lora import LoraScalesBody, get_lora_adapters, post_lora_adapters
from app.handlers.openapi import get_openapi
from app.handlers.params import ChatBody
from app.handlers.responses import ResponsesBody, post_responses, post_responses_input_tokens
from app.handlers.server_info import (
    get_health,
    get_live,
    get_metrics,
    get_models,
    get_props,
    get_slots,
    post_props,
)
from app.handlers.server_tools import get_tools, post_tools
from app.handlers.slot_actions import SlotFileBody, post_slot_action
from app.handlers.streams import LookupBody, delete_stream, get_stream, post_streams_lookup
from app.handlers.tokens import DetokenizeBody, TokenizeBody, post_detokenize, post_tokenize
from app.handlers.transcriptions import TranscriptionBody, post_transcriptions
from app.protocol.api import ApiReply, ApiRequest, Handler, Route, guard
from app.protocol.errors import NotSupportedError

ContextHandler = Callable[[ServerContext, ApiRequest], ApiReply]


@dataclass(frozen=True)
class Switch:
    """A setting a route needs: without it the route answers 501 naming the flag, as llama-server."""

    is_on: Callable[[Settings], bool]
    message: str


METRICS = Switch(lambda s: s.metrics, "This server does not support metrics endpoint. Start it with `--metrics`")
SLOTS = Switch(lambda s: s.slots, "This server does not support slots endpoint. Start it with `--slots`")
PROPS = Switch(lambda s: s.props,
               "This server does not support changing global properties. Start it with `--props`")
RERANKING = Switch(lambda s: s.reranking, "This server does not support reranking. Start it with `--reranking`")
SLOT_FILES = Switch(lambda s: bool(s.slot_save_path),
                    "This server does not support slots action. Start it with `--slot-save-path`")
# llama-server: --embeddings (and --reranking) make an embedding-only server.
GENERATION = Switch(lambda s: not (s.embeddings or s.reranking),
                    "This server does not support completions. Start it without `--embeddings`")


@dataclass(frozen=True)
class RouteSpec:
    method: str
    path: str
    handler: ContextHandler
    public: bool = False
    body: type[BaseModel] | None = None
    streams: bool = False
    requires: Switch | None = None
    polled: bool = False  # what llama-server leaves out of its request log: health, models, props, metrics
    form: bool = False  # a form upload (multipart, or URL-encoded fields); other routes read JSON whatever the type
    replays: bool = False  # streams a resumable session back; its X-Conversation-Id names that session
    local: bool = False  # needs no model (its handler reads only ``ctx.agent``): a router answers it itself
    while_loading: bool = False  # answered while the model loads (liveness)


ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("GET", "/health", get_health, public=True, polled=True),
    RouteSpec("GET", "/v1/health", get_health, public=True, polled=True),
    RouteSpec("GET", "/live", get_live, public=True, polled=True, while_loading=True),
    RouteSpec("GET", "/metrics", get_metrics, requires=METRICS, polled=True),
    RouteSpec("GET", "/props", get_props, polled=True),
    RouteSpec("POST", "/props", post_props, requires=PROPS),
    RouteSpec("GET", "/models", get_models, public=True, polled=True),
    RouteSpec("GET", "/v1/models", get_models, public=True, polled=True),
    RouteSpec("POST", "/completion", post_completion, body=CompletionBody, streams=True, requires=GENERATION),
    RouteSpec("POST", "/completions", post_completion, body=CompletionBody, streams=True, requires=GENERATION),
    RouteSpec("POST", "/v1/completions", post_openai_completions, body=CompletionBody, streams=True,
              requires=GENERATION),
    RouteSpec("POST", "/chat/completions", post_chat_completions, body=ChatBody, streams=True,
              requires=GENERATION),
    RouteSpec("POST", "/v1/chat/completions", post_chat_completions, body=ChatBody, streams=True,
              requires=GENERATION),
    RouteSpec("POST", "/v1/audio/transcriptions", post_transcriptions, body=TranscriptionBody, streams=True,
              requires=GENERATION, form=True),
    RouteSpec("POST", "/audio/transcriptions", post_transcriptions, body=TranscriptionBody, streams=True,
              requires=GENERATION, form=True),
    RouteSpec("GET", "/v1/stream", get_stream, streams=True, replays=True),
    RouteSpec("POST", "/v1/streams/lookup", post_streams_lookup, body=LookupBody),
    RouteSpec("DELETE", "/v1/stream", delete_stream),
    RouteSpec("POST", "/v1/chat/completions/control", post_chat_control, body=ControlBody, requires=GENERATION),
    RouteSpec("POST", "/chat/completions/input_tokens", post_chat_input_tokens, body=ChatBody),
    RouteSpec("POST", "/v1/chat/completions/input_tokens", post_chat_input_tokens, body=ChatBody),
    RouteSpec("POST", "/v1/responses", post_responses, body=ResponsesBody, streams=True, requires=GENERATION),
    RouteSpec("POST", "/responses", post_responses, body=ResponsesBody, streams=True, requires=GENERATION),
    RouteSpec("POST", "/responses/input_tokens", post_responses_input_tokens, body=ResponsesBody),
    RouteSpec("POST", "/v1/responses/input_tokens", post_responses_input_tokens, body=ResponsesBody),
    RouteSpec("POST", "/v1/messages", post_messages, body=MessagesBody, streams=True, requires=GENERATION),
    RouteSpec("POST", "/v1/messages/count_tokens", post_count_tokens, body=MessagesBody),
    RouteSpec("POST", "/infill", post_infill, body=InfillBody, streams=True, requires=GENERATION),
    RouteSpec("POST", "/embedding", post_embedding, body=NativeEmbeddingBody),
    RouteSpec("POST", "/embeddings", post_embedding, body=NativeEmbeddingBody),
    RouteSpec("POST", "/v1/embeddings", post_openai_embeddings, body=OpenAIEmbeddingBody),
    RouteSpec("POST", "/rerank", post_rerank, body=RerankBody, requires=RERANKING),
    RouteSpec("POST", "/reranking", post_rerank, body=RerankBody, requires=RERANKING),
    RouteSpec("POST", "/v1/rerank", post_rerank, body=RerankBody, requires=RERANKING),
    RouteSpec("POST", "/v1/reranking", post_rerank, body=RerankBody, requires=RERANKING),
    RouteSpec("POST", "/tokenize", post_tokenize, body=TokenizeBody),
    RouteSpec("POST", "/detokenize", post_detokenize, body=DetokenizeBody),
    RouteSpec("POST", "/apply-template", post_apply_template, body=ChatBody),
    RouteSpec("GET", "/lora-adapters", get_lora_adapters),
    RouteSpec("POST", "/lora-adapters", post_lora_adapters, body=LoraScalesBody),
    RouteSpec("GET", "/slots", get_slots, requires=SLOTS),
    RouteSpec("POST", "/slots/:id_slot", post_slot_action, body=SlotFileBody, requires=SLOT_FILES),
    RouteSpec("GET", "/openapi.json", get_openapi, public=True),
    RouteSpec("GET", "/tools", get_tools, local=True),
    RouteSpec("POST", "/tools", post_tools, local=True, streams=True),
    RouteSpec("GET", "/cors-proxy", get_cors_proxy, local=True),
    RouteSpec("POST", "/cors-proxy", post_cors_proxy, local=True),
)


def _route(spec: RouteSpec, handler: Handler) -> Route:
    doc = spec.handler.__doc__
    return Route(spec.method, spec.path, spec.handler.__name__, handler, spec.public, spec.body, spec.streams,
                 doc.strip().splitlines()[0] if doc else "", spec.polled, spec.form, spec.replays, spec.local,
                 spec.while_loading)


def bind_routes(ctx: ServerContext, specs: Iterable[RouteSpec] = ROUTES) -> tuple[Route, ...]:
    def bound(spec: RouteSpec) -> Handler:
        def call(request: ApiRequest) -> ApiReply:
            if spec.requires is not None and not spec.requires.is_on(ctx.settings):
                raise NotSupportedError(spec.requires.message)
            return spec.handler(ctx, request)

        call.__name__ = spec.handler.__name__
        return guard(call)

    return tuple(_route(spec, bound(spec)) for spec in specs)


@dataclass(frozen=True)
class _AgentOnly:
    """The context a router gives its ``local`` routes: agent mode's, nothing of a model."""

    agent: AgentContext


def route_template(specs: Iterable[RouteSpec] = ROUTES, agent: AgentContext | None = None) -> tuple[Route, ...]:
    """The table with no model behind it, for a server that fills the handlers itself (the router): a
    ``local`` route keeps its own handler (it reads only ``agent``), every other is left for it to fill."""
    context = cast(ServerContext, _AgentOnly(agent or AgentContext()))

    def unserved(request: ApiRequest) -> ApiReply:
        raise NotSupportedError(f"{request.method} {request.path} is not served here")

    def local(spec: RouteSpec) -> Handler:
        def call(request: ApiRequest) -> ApiReply:
            return spec.handler(context, request)

        call.__name__ = spec.handler.__name__
        return guard(call)

    return tuple(_route(spec, local(spec) if spec.local else unserved) for spec in specs)
