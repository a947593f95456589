"""Agent mode's flags as llama-server takes them: what each turns on, the CORS default they change, the
refusals that stop a start, and a router that keeps them to itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config.settings import SettingsError, parse_settings, secret_environment
from app.handlers.context import AgentContext
from app.handlers.routes import route_template
from app.http.cors import CorsPolicy
from app.protocol.api import ApiRequest
from app.router.arguments import without_reserved
from app.router.children import child_environment


def settings(*argv: str, **environ: str):  # type: ignore[no-untyped-def]
    return parse_settings(["-m", "model.gguf", *argv], environ, error=lambda message: None)


def test_off_by_default_and_cors_stays_open_as_llama_server() -> None:
    plain = settings()
    assert plain.enabled_tools == () and not plain.exposes_tools and not plain.serves_cors_proxy
    assert plain.enabled_features() == () and CorsPolicy.from_settings(plain).origins == "*"


@pytest.mark.parametrize("argv", [("--tools", "read_file"), ("-ag",), ("--mcp-servers-json", '{"mcpServers": {}}')])
def test_tools_or_mcp_servers_limit_cors_to_localhost_unless_it_is_given(argv: tuple[str, ...]) -> None:
    assert CorsPolicy.from_settings(settings(*argv)).origins == "localhost"
    assert CorsPolicy.from_settings(settings(*argv, "--cors-origins", "*")).origins == "*"


def test_the_proxy_alone_leaves_cors_as_it_is() -> None:
    proxy = settings("--ui-mcp-proxy")
    assert proxy.serves_cors_proxy and CorsPolicy.from_settings(proxy).origins == "*"
    assert proxy.enabled_features() == ("MCP proxy (experimental)",)


def test_agent_is_every_tool_and_the_proxy_and_no_agent_turns_it_off() -> None:
    agent = settings("--agent")
    assert agent.enabled_tools == ("all",) and agent.serves_cors_proxy
    assert settings("--agent", "--no-agent").enabled_tools == ()
    assert settings(LLAMA_ARG_AGENT="1").enabled_tools == ("all",)
    assert settings("--tools", "get_info,read_file", "--tools-runtime", "ssh:box").enabled_features() == (
        "server tools (experimental)", "tools runtime (experimental)")


def test_the_options_the_toolbox_is_built_from(tmp_path: Path) -> None:
    options = settings("--tools", "all", "--tools-root", str(tmp_path), "--tools-max-timeout", "5",
                       "--tools-max-output", "1024").agent_options(secret_environment())
    assert options.limits.root == str(tmp_path) and options.limits.max_timeout == 5
    assert options.limits.max_output == 1024 and "LLAMA_API_KEY" in options.hidden_env
    assert settings("--tools", "all").agent_options().limits.root == str(Path.cwd())


@pytest.mark.parametrize(("argv", "message"), [
    (("--tools", "read_file,nope"), 'unknown tool "nope"'),
    (("--tools-root", "/nowhere/at/all"), "--tools-root"),
    (("--mcp-servers-json", "{not json"), "failed to parse MCP config JSON"),
    (("--mcp-servers-config", "/nowhere.json"), "failed to open MCP config file"),
    (("--mcp-servers-json", json.dumps({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}})), "env"),
    (("--tools-max-timeout", "0"), "below the minimum"),
    (("--tools-ssh-config", "/nowhere/ssh_config"), "--tools-ssh-config"),
])
def test_what_cannot_be_used_stops_the_start_naming_it(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        settings(*argv)


def test_the_inline_mcp_declaration_is_never_logged() -> None:
    from app.server.cli import public_settings

    declared = settings("--mcp-servers-json", json.dumps({"mcpServers": {"gh": {"command": "x",
                                                                                "env": {"TOKEN": "ghp-secret"}}}}))
    assert "ghp-secret" not in json.dumps(public_settings(declared))
    assert "LLAMA_ARG_MCP_SERVERS_JSON" in secret_environment()  # nor handed to a tool's process


def test_a_router_keeps_agent_mode_to_itself() -> None:
    argv = ["--models-dir", "/m", "--tools", "all", "-ag", "--mcp-servers-json", "{}", "--ui-mcp-proxy",
            "--tools-root", "/w", "--tools-runtime", "ssh:x", "-c", "512"]
    assert without_reserved(argv) == ["-c", "512"]
    env = child_environment({"LLAMA_ARG_TOOLS": "all", "LLAMA_ARG_AGENT": "1", "LLAMA_ARG_CTX_SIZE": "512"}, "k")
    assert "LLAMA_ARG_TOOLS" not in env and "LLAMA_ARG_AGENT" not in env and env["LLAMA_ARG_CTX_SIZE"] == "512"


def test_a_routers_local_routes_read_its_agent_context() -> None:
    routes = {(route.method, route.path): route for route in route_template(agent=AgentContext(None, False))}
    off = routes[("GET", "/tools")].handler(ApiRequest("GET", "/tools"))
    assert off.status == 403 and off.body["error"]["type"] == "feature_disabled"
    proxy = routes[("GET", "/cors-proxy")].handler(ApiRequest("GET", "/cors-proxy"))
    assert proxy.status == 403
