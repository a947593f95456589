"""The toolbox ``/tools`` lists and calls: the built-in tools ``--tools`` enables, then each MCP server's tools as
``<server>_<tool>`` (a name already taken is skipped), and where each call runs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from app.agent.edit import EditFile
from app.agent.files import ReadFile, WriteFile
from app.agent.mcp_servers import McpServers, McpTool
from app.agent.options import ALL, BUILTIN_TOOLS, AgentOptions, check_tool_names
from app.agent.runtime import Runtime, make_runtime
from app.agent.search import FileGlobSearch, GrepSearch
from app.agent.shell import ExecShellCommand, GetInfo
from app.agent.tool import Call, Limits, Tool
from app.agent.tool_io import OutsideRoot, make_io

log = logging.getLogger(__name__)



class UnknownTool(LookupError):
    """No such tool, or one that cannot stream."""


def builtin_tools(limits: Limits) -> list[Tool]:
    tools: list[Tool] = [ReadFile(), FileGlobSearch(), GrepSearch(), ExecShellCommand(limits.max_timeout,
                         limits.max_output), WriteFile(), EditFile(), GetInfo()]
    assert tuple(tool.name for tool in tools) == BUILTIN_TOOLS
    return tools


class McpServerTool(Tool):
    kind = "mcp"
    uses_cwd = False

    def __init__(self, tool: McpTool, servers: McpServers) -> None:
        self.tool, self.servers = tool, servers
        self.name = self.display_name = f"{tool.server}_{tool.name}"

    def definition(self) -> dict[str, Any]:
        schema = self.tool.input_schema if isinstance(self.tool.input_schema, dict) else {}
        return {"type": "function", "function": {"name": self.name, "description": self.tool.description,
                                                 "parameters": schema}}

    def invoke(self, call: Call) -> dict[str, Any]:
        return self.servers.call_tool(self.tool.server, self.tool.name, call.params, call.should_stop)


class Toolbox:
    """The enabled tools, the runtime and the MCP servers; ``call`` runs one tool from any thread."""

    def __init__(self, options: AgentOptions) -> None:
        check_tool_names(options.tools)
        self.options = options
        self.runtime: Runtime | None = make_runtime(options.runtime, options.limits.root)
        wanted = set(options.tools)
        self.tools: list[Tool] = [tool for tool in builtin_tools(options.limits)
                                  if ALL in wanted or tool.name in wanted]
        self.mcp: McpServers | None = None
        if options.mcp_servers:
            self.mcp = McpServers(list(options.mcp_servers), options.hidden_env)
            self.mcp.start()
            self._add_mcp_tools(self.mcp)

    def _add_mcp_tools(self, servers: McpServers) -> None:
        taken = {tool.name for tool in self.tools}
        added = 0
        for listed in servers.tools:
            tool = McpServerTool(listed, servers)
            if tool.name in taken:
                log.warning("MCP tool \"%s\" from server \"%s\" collides with an existing tool, skipping", tool.name,
                            listed.server)
                continue
            taken.add(tool.name)
            self.tools.append(tool)
            added += 1
        if added:
            log.info("Added %d MCP tools", added)

    def listing(self) -> list[dict[str, Any]]:
        return [tool.listing() for tool in self.tools]

    def find(self, name: str, stream: bool) -> Tool:
        for tool in self.tools:
            if tool.name == name:
                if stream and not tool.support_stream:
                    raise UnknownTool(f"tool \"{name}\" does not support stream = true")
                return tool
        raise UnknownTool(f"unknown tool \"{name}\"")

    def call(self, tool: Tool, params: dict[str, Any], cwd: str = "", runtime: str = "", resp_type: str = "", *,
             on_chunk: Callable[[str], bool] | None = None,
             should_stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
        """Run ``tool``; ``runtime`` (x-tool-runtime) wins over ``--tools-runtime``. ToolError or InvalidParams
        for the caller's mistakes."""
        where = runtime or (self.runtime.spec() if self.runtime is not None else "")
        limits = self.options.limits
        io = make_io(where, cwd, limits.root, self.options.ssh_command)
        try:
            return tool.invoke(Call(params, io, limits, where, resp_type, on_chunk, should_stop))
        except OutsideRoot as exc:  # the model's path: it reads why, as any other tool error
            return {"error": str(exc)}

    def close(self) -> None:
        if self.mcp is not None:
            self.mcp.close()
        if self.runtime is not None:
            self.runtime.close()
