"""Agent mode, as llama-server's: built-in tools for the web UI's model (--tools, -ag), where they run
(--tools-runtime), MCP servers (--mcp-servers-config, --mcp-servers-json), the web UI's CORS proxy
(--ui-mcp-proxy), and this server's bounds on them (--tools-root, --tools-max-timeout, --tools-max-output).
Everything here is off by default; each runs with the server's privileges."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from app.agent.mcp_config import McpConfigError, McpServerConfig, load_servers
from app.agent.options import ALL, BUILTIN_TOOLS, AgentOptions, check_tool_names
from app.agent.tool import Limits
from app.config.options import SettingsError, option

RISK = "do not enable in untrusted environments: it runs with the server's privileges"


@dataclass(frozen=True)
class AgentSettings:
    """Agent mode: the web UI's model may act on this machine. Off unless a flag turns it on."""

    tools: tuple[str, ...] = option(("--tools",), "keys", (),
        f"built-in tools for AI agents, comma-separated, or 'all': {', '.join(BUILTIN_TOOLS)}; served at /tools "
        f"for the web UI ({RISK}); limits --cors-origins to localhost by default", env="LLAMA_ARG_TOOLS",
        metavar="TOOL1,TOOL2,...")
    tools_runtime: str = option(("--tools-runtime",), "str", "",
        "run the tools elsewhere: 'docker:IMAGE' / 'podman:IMAGE' (a container started here, stopped at exit), "
        "'docker-container:ID' / 'podman-container:ID' (a running container), 'ssh:HOST' (key-based, its host key "
        "trusted); default: this host", env="LLAMA_ARG_TOOLS_RUNTIME", metavar="OPTION")
    mcp_servers_config: str | None = option(("--mcp-servers-config",), "str", None,
        f"a JSON file of MCP servers in Cursor's format ({{\"mcpServers\": {{NAME: {{command, args, env, cwd, "
        f"timeout_ms}}}}}}), run over stdio; their tools are <server>_<tool> in /tools ({RISK}); limits "
        "--cors-origins to localhost by default", env="LLAMA_ARG_MCP_SERVERS_CONFIG", metavar="PATH")
    mcp_servers_json: str | None = option(("--mcp-servers-json",), "str", None,
        "the same MCP servers' JSON, inline (never logged: a server's env often holds a token)",
        env="LLAMA_ARG_MCP_SERVERS_JSON", metavar="JSON", secret=True)
    agent: bool = option(("-ag", "--agent"), "bool", False,
        f"every built-in tool and the CORS proxy ({RISK}); limits --cors-origins to localhost by default",
        env="LLAMA_ARG_AGENT", negative_flags=("-no-ag", "--no-agent"))
    ui_mcp_proxy: bool = option(("--ui-mcp-proxy", "--webui-mcp-proxy"), "bool", False,
        f"serve /cors-proxy, through which the web UI reaches remote MCP servers ({RISK})",
        env="LLAMA_ARG_UI_MCP_PROXY", negative_flags=("--no-ui-mcp-proxy", "--no-webui-mcp-proxy"))
    tools_root: str | None = option(("--tools-root",), "str", None,
        "the folder the built-in tools may read and write on this host (links followed; '/' for anywhere, as "
        "llama-server); default: the working directory at start-up. exec_shell_command is not bounded by it",
        env="LLAMA_ARG_TOOLS_ROOT", metavar="PATH")
    tools_max_timeout: int = option(("--tools-max-timeout",), "int", 60,
        "the longest a tool's command may run, in seconds (exec_shell_command's timeout is capped to it)",
        env="LLAMA_ARG_TOOLS_MAX_TIMEOUT", minimum=1, maximum=3600, metavar="SECONDS")
    tools_max_output: int = option(("--tools-max-output",), "int", 16 * 1024,
        "the most a tool answers, in bytes (a command's output, a file read as text)",
        env="LLAMA_ARG_TOOLS_MAX_OUTPUT", minimum=256, maximum=64 * 1024 * 1024, metavar="BYTES")
    tools_ssh_config: str | None = option(("--tools-ssh-config",), "str", None,
        "an ssh_config file for 'ssh:HOST' runtimes (ssh -F: host aliases, ports, keys, known hosts)",
        env="LLAMA_ARG_TOOLS_SSH_CONFIG", metavar="PATH")

    @property
    def enabled_tools(self) -> tuple[str, ...]:
        """--tools, or every tool with --agent."""
        return (ALL,) if self.agent else self.tools

    @property
    def serves_cors_proxy(self) -> bool:
        return self.agent or self.ui_mcp_proxy

    @functools.cached_property
    def mcp_servers(self) -> tuple[McpServerConfig, ...]:
        try:
            return tuple(load_servers(self.mcp_servers_config, self.mcp_servers_json))
        except McpConfigError as exc:
            raise SettingsError(str(exc)) from None

    @property
    def exposes_tools(self) -> bool:
        """Tools or MCP servers are on: /tools acts on this machine (--cors-origins then defaults to localhost)."""
        return bool(self.enabled_tools) or bool(self.mcp_servers_config or self.mcp_servers_json)

    def agent_options(self, hidden_env: frozenset[str] = frozenset()) -> AgentOptions:
        """What the toolbox is built from; the root's default is the working directory now."""
        root = os.path.abspath(self.tools_root) if self.tools_root else os.getcwd()
        ssh = ("ssh", "-F", self.tools_ssh_config) if self.tools_ssh_config else ("ssh",)
        return AgentOptions(self.enabled_tools, self.tools_runtime, self.mcp_servers,
                            Limits(root, self.tools_max_timeout, self.tools_max_output), ssh, hidden_env)

    def enabled_features(self) -> tuple[str, ...]:
        """The start-up warning's list, as llama-server's."""
        names = []
        if self.serves_cors_proxy:
            names.append("MCP proxy (experimental)")
        if self.enabled_tools:
            names.append("server tools (experimental)")
        if self.tools_runtime:
            names.append("tools runtime (experimental)")
        if self.mcp_servers:
            names.append("MCP servers (experimental)")
        return tuple(names)

    def check(self) -> None:
        """Tool names known, the MCP declarations readable, the root and the ssh config there."""
        try:
            check_tool_names(self.tools)
        except ValueError as exc:
            raise SettingsError(f"--tools: {exc}") from None
        _ = self.mcp_servers
        if self.tools_root is not None and not os.path.isdir(self.tools_root):
            raise SettingsError(f"--tools-root: {self.tools_root!r} is not a directory")
        if self.tools_ssh_config is not None and not os.access(self.tools_ssh_config, os.R_OK):
            raise SettingsError(f"--tools-ssh-config: cannot read {self.tools_ssh_config!r}")
