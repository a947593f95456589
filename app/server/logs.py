"""Logging set-up: JSON lines with Cloud Logging's ``severity`` on Vertex, plain text otherwise."""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass


class CloudLoggingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        entry: dict[str, object] = {
            "severity": record.levelname,
            "message": message,
            "logger": record.name,
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
        }
        for key in ("httpRequest", "request_id", "tokens"):
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        return json.dumps(entry, ensure_ascii=False)


# llama-server's -lv values: 0 generic (the most quiet here), 1 errors, 2 warnings, 3 info, 4 debug
VERBOSITY_LEVELS = {0: logging.CRITICAL, 1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO}
_COLORS = {"DEBUG": "\033[90m", "INFO": "\033[32m", "WARNING": "\033[33m", "ERROR": "\033[31m",
           "CRITICAL": "\033[1;31m"}


@dataclass(frozen=True)
class LogOptions:
    """How the log is written (llama-server's --log-* flags)."""

    verbosity: int = 3  # -lv; -v is 4 and above
    json_lines: bool = False
    disable: bool = False
    file: str | None = None
    colors: str = "auto"  # on, off, auto
    prefix: bool = True
    timestamps: bool = True


class TextFormatter(logging.Formatter):
    def __init__(self, options: LogOptions, colored: bool) -> None:
        parts = (["%(asctime)s"] if options.timestamps else []) + (["%(levelname)s %(name)s:"] if options.prefix
                                                                   else [])
        super().__init__(" ".join([*parts, "%(message)s"]))
        self._colored = colored and options.prefix

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        color = _COLORS.get(record.levelname) if self._colored else None
        return text.replace(record.levelname, f"{color}{record.levelname}\033[0m", 1) if color else text


def configure_logging(options: LogOptions) -> None:
    """The root logger's handlers and level: stderr (and ``--log-file``), text or JSON lines."""
    root = logging.getLogger()
    handlers: list[logging.Handler] = []
    if not options.disable:
        handlers.append(logging.StreamHandler(sys.stderr))
        if options.file:
            handlers.append(logging.FileHandler(options.file, encoding="utf-8"))
    for handler in handlers:
        is_terminal = isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler) \
            and sys.stderr.isatty()
        colored = options.colors in ("on", "true", "1") or (options.colors == "auto" and is_terminal)
        handler.setFormatter(CloudLoggingFormatter() if options.json_lines else TextFormatter(options, colored))
    root.handlers[:] = handlers or [logging.NullHandler()]
    debug = options.verbosity >= 4
    root.setLevel(logging.DEBUG if debug else VERBOSITY_LEVELS.get(options.verbosity, logging.INFO))
    logging.getLogger("llama.cpp").setLevel(logging.NOTSET if debug else logging.WARNING)
    if options.disable:
        logging.disable(logging.CRITICAL)
