"""CORS as llama-server answers it (``--cors-origins``, ``--cors-methods``, ``--cors-headers``,
``--cors-credentials``): the one place that decides a response's ``Access-Control-*`` headers."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from app.config.http import ANY_ORIGIN, LOCAL_ORIGINS, HttpSettings

LOCALHOST = LOCAL_ORIGINS  # --cors-origins' shorthand: any origin whose host is this machine
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def is_local_origin(origin: str) -> bool:
    """Whether an Origin header names this machine (localhost, 127.0.0.1 or ::1, any port)."""
    try:
        return urlsplit(origin).hostname in _LOCAL_HOSTS
    except ValueError:
        return False


_OPTIONS = HttpSettings()  # the declared defaults


@dataclass(frozen=True)
class CorsPolicy:
    # the defaults are the options' (--cors-origins, --cors-methods, --cors-headers, --cors-credentials)
    origins: str = ANY_ORIGIN  # "*", "localhost", or comma-separated origins (may include "localhost")
    methods: str = _OPTIONS.cors_methods
    headers: str = _OPTIONS.cors_headers
    credentials: bool = _OPTIONS.cors_credentials

    @classmethod
    def from_settings(cls, settings: HttpSettings) -> CorsPolicy:
        return cls(settings.allowed_origins, settings.cors_methods, settings.cors_headers, settings.cors_credentials)

    def allowed_origin(self, origin: str | None) -> str | None:
        """The ``Access-Control-Allow-Origin`` for a request from ``origin``; None: no header.

        As llama-server: with ``*`` the origin is echoed when credentials are allowed (a browser
        refuses ``*`` with credentials), else ``*``; ``localhost`` echoes local origins only. A list
        echoes the origin it holds (llama-server sends the list itself, which browsers refuse when
        it names more than one)."""
        given = {item.strip() for item in self.origins.split(",") if item.strip()}
        if "*" in given:
            return origin if self.credentials else "*"
        if not origin:
            return None
        if origin in given or (LOCALHOST in given and is_local_origin(origin)):
            return origin
        return None

    def preflight_headers(self) -> dict[str, str]:
        """What an OPTIONS request gets besides the origin."""
        return {"Access-Control-Allow-Credentials": "true" if self.credentials else "false",
                "Access-Control-Allow-Methods": self.methods, "Access-Control-Allow-Headers": self.headers}


DEFAULT_CORS = CorsPolicy()  # llama-server's defaults
