"""Agent mode's part of the worker (an instance's or a router's): the toolbox (the runtime started, the MCP
servers asked for their tools) and the start-up warning that says what is on and with whose privileges."""

from __future__ import annotations

import logging
import os
import pwd

from app.agent.toolbox import Toolbox
from app.config.settings import Settings, secret_environment
from app.handlers.context import AgentContext

log = logging.getLogger(__name__)


def _user() -> str:
    try:
        return f"{pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()})"
    except KeyError:
        return f"uid {os.getuid()}"


def build_agent(settings: Settings, on_vertex: bool) -> AgentContext:
    """What /tools and /cors-proxy serve; nothing starts unless a flag (or its LLAMA_ARG_* variable) asks."""
    features = settings.enabled_features()
    if not features:
        return AgentContext()
    options = settings.agent_options(secret_environment())
    where = "this container" if on_vertex else "this server"
    log.warning("security: %s enabled - do not expose to untrusted environments; the tools run with %s's "
                "privileges, as %s%s", ", ".join(features), where, _user(),
                f"; built-in tools confined to {options.limits.root} (--tools-root)"
                if options.tools and not options.runtime else "")
    # /tools is on where there are tools to list (llama-server: --tools, or MCP servers declared)
    toolbox = Toolbox(options) if options.tools or options.mcp_servers else None
    if toolbox is not None:
        log.info("tools: %s", ", ".join(tool.name for tool in toolbox.tools) or "none")
    return AgentContext(toolbox, settings.serves_cors_proxy)
