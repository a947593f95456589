"""read_file and write_file, as llama-server's."""

from __future__ import annotations

import base64
from typing import Any

from app.agent.tool import Call, Tool, function

BASE64_MAX = 32 * 1024 * 1024  # x-resp-type: base64 reads (the web UI's attachments)


class ReadFile(Tool):
    name, display_name = "read_file", "Read file"

    def definition(self) -> dict[str, Any]:
        return function(self.name, "Read the contents of a file. Optionally specify a 1-based line range. "
                        "If append_loc is true, each line is prefixed with its line number (e.g. \"1\u2192...\").",
                        {"path": {"type": "string", "description": "Path to the file"},
                         "start_line": {"type": "integer", "description": "First line to read, 1-based (default: 1)"},
                         "end_line": {"type": "integer",
                                      "description": "Last line to read, 1-based inclusive (default: end of file)"},
                         "append_loc": {"type": "boolean", "description": "Prefix each line with its line number"}},
                        ("path",))

    def invoke(self, call: Call) -> dict[str, Any]:
        path = call.get("path", str)
        start_line, end_line = call.get("start_line", int, 1), call.get("end_line", int, -1)
        append_loc = call.get("append_loc", bool, False)
        size = call.io.file_size(path)
        if size is None:
            return {"error": f"cannot stat file: {path}"}
        if call.resp_type == "base64":
            if size > BASE64_MAX:
                return {"error": f"file too large ({size} bytes, max {BASE64_MAX})"}
            content = call.io.read_file(path)
            if content is None:
                return {"error": f"failed to open file: {path}"}
            return {"base64": base64.b64encode(content).decode("ascii"), "size_bytes": len(content)}
        cap = call.limits.max_output
        if size > cap and end_line == -1:
            return {"error": f"file too large ({size} bytes, max {cap}). Use start_line/end_line to read a portion."}
        content = call.io.read_file(path)
        if content is None:
            return {"error": f"failed to open file: {path}"}
        return {"plain_text_response": _lines(content.decode("utf-8", "replace"), start_line, end_line, append_loc,
                                              cap)}


def _lines(text: str, start: int, end: int, append_loc: bool, cap: int) -> str:
    out: list[str] = []
    used = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if number < start:
            continue
        if end != -1 and number > end:
            break
        piece = f"{number}\u2192{line}\n" if append_loc else f"{line}\n"
        size = len(piece.encode())
        if used + size > cap:
            out.append("[output truncated]")
            break
        out.append(piece)
        used += size
    return "".join(out)


class WriteFile(Tool):
    name, display_name, permission_write = "write_file", "Write file", True

    def definition(self) -> dict[str, Any]:
        return function(self.name, "Write content to a file, creating it (including parent directories) if it does "
                        "not exist. May use with edit_file for more complex edits.",
                        {"path": {"type": "string", "description": "Path of the file to write"},
                         "content": {"type": "string", "description": "Content to write"}}, ("path", "content"))

    def invoke(self, call: Call) -> dict[str, Any]:
        path, content = call.get("path", str), call.get("content", str)
        data = content.encode("utf-8")
        if not call.io.write_file(path, data):
            return {"error": f"failed to write file: {path}"}
        return {"result": "file written successfully", "path": path, "bytes": len(data)}
