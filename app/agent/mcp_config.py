"""MCP server declarations in Cursor's format (``{"mcpServers": {NAME: {command, args, env, cwd, timeout_ms}}}``),
from ``--mcp-servers-config FILE`` and ``--mcp-servers-json JSON``, as llama-server reads them."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 30000


class McpConfigError(ValueError):
    """A declaration that cannot be read: the start stops, naming it."""


@dataclass(frozen=True)
class McpServerConfig:
    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    timeout_ms: int = DEFAULT_TIMEOUT_MS


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise McpConfigError(f"{what} must be an array of strings")
    return list(value)


def _server(name: str, entry: object) -> McpServerConfig | None:
    if not isinstance(entry, dict):
        raise McpConfigError(f"mcpServers.{name} must be an object")
    command = entry.get("command", "")
    if not isinstance(command, str) or not command:
        log.warning("MCP server '%s' has no command, skipping", name)
        return None
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(value, str) for value in env.values()):
        raise McpConfigError(f"mcpServers.{name}.env must be an object of strings")
    timeout = entry.get("timeout_ms", DEFAULT_TIMEOUT_MS)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
        raise McpConfigError(f"mcpServers.{name}.timeout_ms must be a positive integer")
    cwd = entry.get("cwd", "")
    if not isinstance(cwd, str):
        raise McpConfigError(f"mcpServers.{name}.cwd must be a string")
    args = _strings(entry.get("args", []), f"mcpServers.{name}.args")
    return McpServerConfig(name, command, tuple(args), dict(env), cwd, timeout)


def parse_servers(text: str, source: str) -> list[McpServerConfig]:
    """The servers ``text`` declares; no ``mcpServers`` object is none (with a warning), as llama-server."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise McpConfigError(f"{source}: failed to parse MCP config JSON: {exc}") from None
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict) or not servers:
        log.warning("MCP config %s: no servers found in JSON", source)
        return []
    try:
        return [config for name, entry in servers.items() if (config := _server(name, entry)) is not None]
    except McpConfigError as exc:
        raise McpConfigError(f"{source}: {exc}") from None


def load_servers(config_file: str | None, inline: str | None) -> list[McpServerConfig]:
    """Both sources' servers, the file's first; a name seen twice is skipped (with a warning)."""
    found: list[McpServerConfig] = []
    if config_file:
        try:
            with open(config_file, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise McpConfigError(f"--mcp-servers-config: failed to open MCP config file {config_file}: {exc}") \
                from None
        found += parse_servers(text, f"--mcp-servers-config {config_file}")
    if inline:
        found += parse_servers(inline, "--mcp-servers-json")
    unique: dict[str, McpServerConfig] = {}
    for config in found:
        if config.name in unique:
            log.warning("MCP config: duplicate server name '%s', skipping", config.name)
            continue
        unique[config.name] = config
    return list(unique.values())
