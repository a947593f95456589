"""What agent mode's flags ask for, light enough for the settings (the gunicorn master imports them): the
built-in tools' names and the options the toolbox is built from (app/agent/toolbox.py)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from app.agent.mcp_config import McpServerConfig
from app.agent.tool import Limits

BUILTIN_TOOLS = ("read_file", "file_glob_search", "grep_search", "exec_shell_command", "write_file", "edit_file",
                 "get_info")
ALL = "all"


def check_tool_names(names: Collection[str]) -> None:
    """ValueError naming the first unknown name of ``--tools``."""
    for name in names:
        if name != ALL and name not in BUILTIN_TOOLS:
            raise ValueError(f"unknown tool \"{name}\". available tools: {', '.join(BUILTIN_TOOLS)}")


@dataclass(frozen=True)
class AgentOptions:
    """What the flags ask for (app/config/agent.py builds it)."""

    tools: tuple[str, ...] = ()
    runtime: str = ""
    mcp_servers: tuple[McpServerConfig, ...] = ()
    limits: Limits = field(default_factory=Limits)
    ssh_command: tuple[str, ...] = ("ssh",)
    hidden_env: frozenset[str] = frozenset()
