"""What a tool is (its name, permissions, definition, how it runs) and what one call carries."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.agent.tool_io import ToolIO

_MISSING = object()
_TYPES: dict[type, str] = {str: "a string", int: "an integer", bool: "a boolean", list: "an array",
                           dict: "an object"}


class InvalidParams(Exception):
    """A parameter missing or of the wrong type."""


@dataclass(frozen=True)
class Limits:
    """The bounds every call runs under (``--tools-root``, ``--tools-max-timeout``, ``--tools-max-output``)."""

    root: str = "/"
    max_timeout: int = 60
    max_output: int = 16 * 1024


@dataclass(frozen=True)
class Call:
    """One call: the model's parameters, the IO it runs through, and what the client's headers set."""

    params: dict[str, Any]
    io: ToolIO
    limits: Limits
    runtime: str = ""  # the isolate named by x-tool-runtime or --tools-runtime ("" is the host)
    resp_type: str = ""  # x-resp-type: "base64" makes read_file answer the bytes
    on_chunk: Callable[[str], bool] | None = None  # a streamed call; False: the client left
    should_stop: Callable[[], bool] = lambda: False  # the client left

    def get(self, name: str, kind: type, default: Any = _MISSING) -> Any:
        """Parameter ``name`` of type ``kind``; a missing required one or a wrong type is InvalidParams."""
        value = self.params.get(name, default)
        if value is _MISSING:
            raise InvalidParams(f"missing parameter: {name}")
        if value is default:
            return value
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise InvalidParams(f"parameter {name} must be {_TYPES[kind]}")
        return value


class Tool(ABC):
    """One tool of ``/tools``: its listing (GET) and its invocation (POST)."""

    name: str = ""
    display_name: str = ""
    permission_write: bool = False
    support_stream: bool = False
    uses_cwd: bool = True
    kind: str = "server"

    @abstractmethod
    def definition(self) -> dict[str, Any]:
        """The OpenAI-style function definition the model is given."""

    @abstractmethod
    def invoke(self, call: Call) -> dict[str, Any]:
        """Run the call; a problem the model should read is ``{"error": ...}``, not an exception."""

    def listing(self) -> dict[str, Any]:
        return {"display_name": self.display_name, "tool": self.name, "type": self.kind,
                "permissions": {"write": self.permission_write}, "uses_cwd": self.uses_cwd,
                "definition": self.definition()}


def function(name: str, description: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An OpenAI function definition."""
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = list(required)
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}
