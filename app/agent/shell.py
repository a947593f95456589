"""exec_shell_command (streamable) and get_info, as llama-server's; the timeout and output caps are
``--tools-max-timeout`` and ``--tools-max-output``."""

from __future__ import annotations

from typing import Any

from app.agent.tool import Call, Tool, function
from app.agent.tool_io import HostIO

DEFAULT_TIMEOUT = 10  # seconds, as llama-server's
INFO_TIMEOUT, INFO_MAX_OUTPUT = 5, 4096


class ExecShellCommand(Tool):
    name, display_name, permission_write, support_stream = "exec_shell_command", "Execute shell command", True, True

    def __init__(self, max_timeout: int, max_output: int) -> None:
        self.max_timeout, self.max_output = max_timeout, max_output

    def definition(self) -> dict[str, Any]:
        return function(self.name, "Execute a shell command and return its output (stdout and stderr combined).",
                        {"command": {"type": "string", "description": "Shell command to execute"},
                         "timeout": {"type": "integer", "description": f"Timeout in seconds (default "
                                     f"{DEFAULT_TIMEOUT}, max {self.max_timeout})"},
                         "max_output_size": {"type": "integer", "description": f"Maximum output size in bytes "
                                             f"(default {self.max_output})"}}, ("command",))

    def invoke(self, call: Call) -> dict[str, Any]:
        command = call.get("command", str)
        timeout = max(1, min(call.get("timeout", int, DEFAULT_TIMEOUT), call.limits.max_timeout))
        max_output = max(0, min(call.get("max_output_size", int, call.limits.max_output), call.limits.max_output))
        result = call.io.run(["sh", "-c", command], max_output, timeout, call.on_chunk)
        tail = f"\n[exit code: {result.exit_code}]" + (" [exit due to timed out]" if result.timed_out else "")
        if call.on_chunk is not None:
            call.on_chunk(tail)
            return {}
        return {"plain_text_response": result.output + tail}


class GetInfo(Tool):
    name, display_name = "get_info", "Get Runtime Info"

    def definition(self) -> dict[str, Any]:
        return function(self.name, "Returns runtime info: the OS name/version and the current working directory", {})

    def invoke(self, call: Call) -> dict[str, Any]:
        result = call.io.run(["uname", "-a"], INFO_MAX_OUTPUT, INFO_TIMEOUT)
        os_info = result.output.strip() if result.exit_code == 0 and not result.timed_out else "unknown"
        cwd = call.io.cwd
        if not cwd and isinstance(call.io, HostIO):
            cwd = call.io.base
        elif not cwd:
            pwd = call.io.run(["pwd"], INFO_MAX_OUTPUT, INFO_TIMEOUT)
            cwd = pwd.output.strip() if pwd.exit_code == 0 and not pwd.timed_out else "unknown"
        return {"os": os_info, "cwd": cwd}
