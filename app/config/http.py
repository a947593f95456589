"""The HTTP side: where it listens, TLS, API keys, which endpoints, CORS, the web UI, limits."""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config.options import SettingsError, option
from app.ui import BUILTIN_UI_DIRECTORY


def _read(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"--ui-config-file: cannot read {path!r} ({exc})") from None


ANY_ORIGIN, LOCAL_ORIGINS = "*", "localhost"  # --cors-origins' defaults


@dataclass(frozen=True)
class HttpSettings:
    """The HTTP side: where it listens, TLS, API keys, which endpoints, CORS, the web UI, limits."""

    host: str = option(("--host",), "str", "127.0.0.1",
        "addresses to listen on, comma-separated: IP addresses, or UNIX socket paths ending in .sock",
        env="LLAMA_ARG_HOST")
    port: int = option(("--port",), "int", 8080, "port to listen on", env="LLAMA_ARG_PORT", minimum=0,
        maximum=65535)
    grpc_port: int = option(("--grpc-port",), "int", 0,
        "also serve gRPC on this port, on the --host addresses: the vertex_llama.v1.Llama service (predict and "
        "chat, unary and streamed), grpc.health.v1 and reflection; Vertex AI's grpcPorts send :directPredict "
        "and :directRawPredict here (0: off)", env="LLAMA_ARG_GRPC_PORT", minimum=0, maximum=65535)
    api_keys: tuple[str, ...] = option(("--api-key",), "keys", (),
        "API key(s), comma-separated; repeatable", env="LLAMA_API_KEY", metavar="KEY", secret=True)
    api_key_file: str | None = option(("--api-key-file",), "str", None,
        "file with one API key per line", env="LLAMA_ARG_API_KEY_FILE", metavar="FNAME")
    metrics: bool = option(("--metrics",), "bool", False, "enable GET /metrics (Prometheus)",
        env="LLAMA_ARG_ENDPOINT_METRICS")
    slots: bool = option(("--slots",), "bool", True, "enable GET /slots", env="LLAMA_ARG_ENDPOINT_SLOTS",
        negative_flags=("--no-slots",))
    slots_debug: bool = option(("--slots-debug",), "bool", False,
        "GET /slots shows each slot's whole request (grammar, stop strings, logit bias, prompt and text): "
        "other users' requests; by default only its sampling numbers, as llama-server",
        env="LLAMA_SERVER_SLOTS_DEBUG")
    props: bool = option(("--props",), "bool", False, "enable POST /props",
        env="LLAMA_ARG_ENDPOINT_PROPS")
    reuse_port: bool = option(("--reuse-port",), "bool", False,
        "let several sockets bind the same port (SO_REUSEPORT)", env="LLAMA_ARG_REUSE_PORT")
    ssl_key_file: str | None = option(("--ssl-key-file",), "str", None,
        "serve HTTPS: the PEM private key (with --ssl-cert-file)", env="LLAMA_ARG_SSL_KEY_FILE", metavar="FNAME")
    ssl_cert_file: str | None = option(("--ssl-cert-file",), "str", None,
        "serve HTTPS: the PEM certificate (with --ssl-key-file)", env="LLAMA_ARG_SSL_CERT_FILE", metavar="FNAME")
    sse_ping_interval: int = option(("--sse-ping-interval",), "int", 30,
        "seconds a stream may stay silent before an SSE comment is sent to keep it alive (-1: never); a "
        "request's sse_ping_interval wins", env="LLAMA_ARG_SSE_PING_INTERVAL", minimum=-1, metavar="SECONDS")
    threads_http: int = option(("--threads-http",), "int", -1,
        "HTTP threads (-1 = max(parallel + 4, cores - 1))", env="LLAMA_ARG_THREADS_HTTP",
        minimum=-1)
    timeout: int = option(("-to", "--timeout"), "int", 600,
        "HTTP read/write timeout in seconds: a connection that sends or takes nothing for this long is closed",
        env="LLAMA_ARG_TIMEOUT", minimum=1)
    api_prefix: str = option(("--api-prefix",), "str", "", "prefix every route with this path",
        env="LLAMA_ARG_API_PREFIX", metavar="PREFIX")
    max_body_bytes: int = option(("--max-body-bytes",), "int", 10 * 1024 * 1024,
        "largest request body accepted (413 above it); the default matches a dedicated Vertex AI endpoint",
        env="LLAMA_ARG_MAX_BODY_BYTES", minimum=1)
    cors_origins: str | None = option(("--cors-origins",), "str", None,
        "comma-separated origins allowed by CORS ('*': any origin; 'localhost': origins on this machine); default "
        "'*', or 'localhost' once tools or MCP servers are on (--tools, -ag, --mcp-servers-*)",
        env="LLAMA_ARG_CORS_ORIGINS", metavar="ORIGINS")
    cors_methods: str = option(("--cors-methods",), "str", "GET, POST, DELETE, OPTIONS",
        "comma-separated methods allowed by CORS", env="LLAMA_ARG_CORS_METHODS", metavar="METHODS")
    cors_headers: str = option(("--cors-headers",), "str", "*", "comma-separated headers allowed by CORS",
        env="LLAMA_ARG_CORS_HEADERS", metavar="HEADERS")
    cors_credentials: bool = option(("--cors-credentials",), "bool", True,
        "allow credentials in CORS requests (with --cors-origins '*' the origin is echoed)",
        env="LLAMA_ARG_CORS_CREDENTIALS", negative_flags=("--no-cors-credentials",))
    ui: bool = option(("--ui", "--webui"), "bool", True,
        "serve the web UI at / (chat, the Vertex AI predict console, live slots); public, served while the "
        "model loads", env="LLAMA_ARG_UI", negative_flags=("--no-ui", "--no-webui"))
    static_path: str | None = option(("--path",), "str", None,
        "serve the static files of this directory at / instead of the built-in web UI",
        env="LLAMA_ARG_STATIC_PATH", metavar="PATH")
    ui_config: str | None = option(("--ui-config", "--webui-config"), "str", None,
        "the web UI's default settings, a JSON object (/props ui_settings; the built-in UI takes temperature, "
        "top_p, top_k, min_p, max_tokens, seed, system, stop)", env="LLAMA_ARG_UI_CONFIG", metavar="JSON")
    ui_config_file: str | None = option(("--ui-config-file", "--webui-config-file"), "str", None,
        "a file holding --ui-config's JSON (--ui-config's keys win)", env="LLAMA_ARG_UI_CONFIG_FILE",
        metavar="PATH")

    @property
    def allowed_origins(self) -> str:
        """--cors-origins, else its default: ``localhost`` where tools act on this machine, as llama-server."""
        if self.cors_origins is not None:
            return self.cors_origins
        return LOCAL_ORIGINS if getattr(self, "exposes_tools", False) else ANY_ORIGIN

    @property
    def listen_hosts(self) -> tuple[str, ...]:
        """``--host`` as llama-server splits it: comma-separated, blanks dropped."""
        return tuple(host.strip() for host in self.host.split(",") if host.strip())

    @property
    def ui_directory(self) -> str | None:
        """The directory served at ``/``: ``--path``, else the built-in UI; None with ``--no-ui``."""
        if not self.ui:
            return None
        return self.static_path or str(BUILTIN_UI_DIRECTORY)

    @property
    def route_prefix(self) -> str:
        prefix = self.api_prefix.rstrip("/")
        if prefix and not prefix.startswith("/"):
            prefix = "/" + prefix
        return prefix

    def all_api_keys(self) -> tuple[str, ...]:
        """Keys from ``--api-key`` and from ``--api-key-file`` (read at start-up)."""
        keys = list(self.api_keys)
        if self.api_key_file:
            with open(self.api_key_file, encoding="utf-8") as handle:  # one a line; # starts a comment line
                found = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
            if not found:  # fail closed: a file meant to hold keys turns nothing off by being empty
                raise SettingsError(f"--api-key-file {self.api_key_file}: the file holds no key")
            keys.extend(found)
        return tuple(keys)

    @functools.cached_property
    def ui_settings(self) -> dict[str, Any]:
        """--ui-config-file's settings, then --ui-config's on top (each checked to be a JSON object)."""
        settings: dict[str, Any] = {}
        for flag, text in (("--ui-config-file", _read(self.ui_config_file)), ("--ui-config", self.ui_config)):
            if text is None:
                continue
            try:
                parsed = json.loads(text)
            except ValueError as exc:
                raise SettingsError(f"{flag}: not JSON ({exc})") from None
            if not isinstance(parsed, dict):
                raise SettingsError(f"{flag}: must be a JSON object")
            settings.update(parsed)
        return settings

    def check(self) -> None:
        """The addresses, the TLS pair, --path and the UI's settings are usable; a SettingsError names the
        option."""
        _ = self.ui_settings
        if self.static_path is not None and not os.path.isdir(self.static_path):
            raise SettingsError(f"--path: {self.static_path!r} is not a directory")
        if not self.listen_hosts:
            raise SettingsError("--host: give at least one address")
        if self.port == 0 and sum(not host.endswith(".sock") for host in self.listen_hosts) > 1:
            raise SettingsError("--port 0 is not supported with several TCP addresses in --host")
        if self.grpc_port and self.grpc_port == self.port:
            raise SettingsError(f"--grpc-port {self.grpc_port}: that is --port, the HTTP side's")
        if (self.ssl_key_file is None) != (self.ssl_cert_file is None):
            raise SettingsError("--ssl-key-file and --ssl-cert-file: give both to serve HTTPS")
        for name, path in (("--ssl-key-file", self.ssl_key_file), ("--ssl-cert-file", self.ssl_cert_file)):
            if path is not None and not os.access(path, os.R_OK):
                raise SettingsError(f"{name}: cannot read {path!r}")
