"""file_glob_search and grep_search, as llama-server's (its glob rules: ``*`` stays within a directory,
``**`` crosses them; a pattern with no ``/`` matches the base name at any depth)."""

from __future__ import annotations

import functools
import re
from typing import Any

from app.agent.tool import Call, Tool, function
from app.agent.tool_io import Entry

MAX_RESULTS = 100
KINDS = ("file", "dir", "all")


@functools.lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, index = [], 0
    while index < len(pattern):
        char = pattern[index]
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (close := pattern.find("]", index + 2)) != -1:
            body = pattern[index + 1:close]
            negate = body[:1] == "!"
            body = body[1:] if negate else body
            out.append(("[^" if negate else "[") + body.replace("\\", "\\\\") + "]")
            index = close
        else:
            out.append(re.escape(char))
        index += 1
    return re.compile("".join(out), re.DOTALL)


def glob_match(pattern: str, path: str) -> bool:
    return _glob_regex(pattern).fullmatch(path) is not None


def path_glob_match(pattern: str, rel: str) -> bool:
    if "/" not in pattern:
        return glob_match(pattern, rel.rsplit("/", 1)[-1])
    if pattern == "**" or pattern.startswith(("**/", "/")):
        return glob_match(pattern, rel)
    return glob_match("**/" + pattern, rel)


def _kept(entries: list[Entry], include: str, exclude: str) -> list[Entry]:
    return [entry for entry in entries if path_glob_match(include, entry.rel)
            and not (exclude and path_glob_match(exclude, entry.rel))]


class FileGlobSearch(Tool):
    name, display_name = "file_glob_search", "File search"

    def definition(self) -> dict[str, Any]:
        return function(self.name,
            "Recursively search for files matching a glob pattern under a directory. Automatically skips files "
            "ignored by .gitignore (when the directory is inside a git repo) and common junk directories (.git, "
            "node_modules, build, dist, etc.) otherwise. A pattern with no '/' (e.g. \"*.cpp\") matches the file's "
            "basename at any depth. A pattern containing '/' matches the full relative path; unless already "
            "anchored with \"**/\" or a leading '/', it is automatically prefixed with \"**/\". Use type=\"dir\" or "
            "\"all\" to also list directories; directory entries are suffixed with '/' in the output. Note: "
            "directory listings do not apply .gitignore filtering.",
            {"path": {"type": "string", "description": "Base directory to search in"},
             "include": {"type": "string", "description": "Glob pattern for files to include (e.g. \"*.cpp\" or "
                         "\"src/**/*.cpp\"). Default: **"},
             "exclude": {"type": "string", "description": "Glob pattern for files to exclude"},
             "type": {"type": "string", "description": "Entry type to return: \"file\" (default), \"dir\" or \"all\""},
             "max_depth": {"type": "integer", "description": "Maximum depth to descend into subdirectories "
                           "(default: 0 = unlimited; 1 = direct children only)"},
             "limit": {"type": "integer", "description": f"Maximum number of results to return, capped at "
                       f"{MAX_RESULTS} (default {MAX_RESULTS})"}}, ("path",))

    def invoke(self, call: Call) -> dict[str, Any]:
        path = call.get("path", str)
        include, exclude = call.get("include", str, "**"), call.get("exclude", str, "")
        kind, max_depth = call.get("type", str, "file"), max(0, call.get("max_depth", int, 0))
        limit = call.get("limit", int, MAX_RESULTS)
        if limit < 1:
            return {"error": f"invalid limit: {limit} (expected 1 or more)"}
        if kind not in KINDS:
            return {"error": f"invalid type: {kind} (expected \"file\", \"dir\" or \"all\")"}
        base = call.io.resolve(path)
        listing = call.io.list_entries(base, max_depth, kind)
        if listing.error:
            return {"error": f"{listing.error}: {path}"}
        matches = _kept(listing.entries, include, exclude)
        shown = matches[:min(limit, MAX_RESULTS)]
        text = "".join(f"{entry.rel}{'/' if entry.is_dir else ''}\n" for entry in shown)
        text += f"\n---\nTotal matches: {len(matches)}\n"
        if len(matches) > len(shown):
            text += (f"[{len(shown)} results limit reached ({len(matches)} total matches). Refine the glob pattern "
                     "to narrow the search.]\n")
        if listing.truncated:
            text += "[results truncated: time budget or unreadable directory]\n"
        entries = [{"path": entry.rel, "type": "dir" if entry.is_dir else "file"} for entry in shown]
        return {"plain_text_response": text, "entries": entries, "base": base}


class GrepSearch(Tool):
    name, display_name = "grep_search", "Grep search"

    def definition(self) -> dict[str, Any]:
        return function(self.name,
            "Search for a pattern in files under a path. Returns matching lines with file paths (and, unless "
            "searching a single file, paths relative to the given directory). Automatically skips files ignored by "
            ".gitignore (when the directory is inside a git repo) and common junk directories (.git, node_modules, "
            "build, dist, etc.) otherwise. include/exclude: a pattern with no '/' matches the basename at any depth; "
            "a pattern containing '/' matches the full relative path (auto-anchored with \"**/\" unless already "
            "anchored).",
            {"path": {"type": "string", "description": "File or directory to search in"},
             "pattern": {"type": "string",
                         "description": "Pattern to search for (regular expression unless literal is true)"},
             "include": {"type": "string", "description": "Glob pattern to filter files (default: **)"},
             "exclude": {"type": "string", "description": "Glob pattern to exclude files"},
             "return_line_numbers": {"type": "boolean", "description": "If true, include line numbers in results"},
             "literal": {"type": "boolean", "description": "Treat pattern as a literal string instead of a regular "
                         "expression (default: false)"},
             "ignore_case": {"type": "boolean", "description": "Case-insensitive search (default: false)"},
             "context_lines": {"type": "integer", "description": "Number of lines of context to show before and "
                               "after each match (default: 0)"}}, ("path", "pattern"))

    def invoke(self, call: Call) -> dict[str, Any]:
        path, source = call.get("path", str), call.get("pattern", str)
        if call.get("literal", bool, False):
            source = re.escape(source)
        try:
            pattern = re.compile(source, re.IGNORECASE if call.get("ignore_case", bool, False) else 0)
        except re.error as exc:
            return {"error": f"invalid regex: {exc}"}
        files = self._files(call, path)
        if isinstance(files, str):
            return {"error": files}
        context = max(0, call.get("context_lines", int, 0))
        numbered = call.get("return_line_numbers", bool, False) or context > 0
        text, total, full = _grep(call, files, pattern, context, numbered)
        text += f"\n---\nTotal matches: {total}\n"
        if full:
            text += f"[{MAX_RESULTS} matches limit reached. Narrow the path/pattern/include to see more.]\n"
        return {"plain_text_response": text}

    @staticmethod
    def _files(call: Call, path: str) -> list[tuple[str, str]] | str:
        absolute = call.io.resolve(path)
        if call.io.is_regular_file(absolute):
            return [(absolute, path)]
        if not call.io.is_directory(absolute):
            return f"path does not exist: {path}"
        listing = call.io.list_entries(absolute, 0, "file")
        if listing.error:
            return f"{listing.error}: {path}"
        include, exclude = call.get("include", str, "**"), call.get("exclude", str, "")
        kept = _kept(listing.entries, include, exclude)
        return [(f"{absolute.rstrip('/')}/{entry.rel}", entry.rel) for entry in kept]


def _grep(call: Call, files: list[tuple[str, str]], pattern: re.Pattern[str], context: int,
          numbered: bool) -> tuple[str, int, bool]:
    out: list[str] = []
    total = 0
    for absolute, shown in files:
        content = call.io.read_file(absolute)
        if content is None:
            continue
        lines = content.decode("utf-8", "replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for index, line in enumerate(lines):
            if total >= MAX_RESULTS:
                return "".join(out), total, True
            if not pattern.search(line):
                continue
            for near in range(max(0, index - context), min(len(lines) - 1, index + context) + 1):
                mark = ":" if near == index else "-"
                out.append(f"{shown}{mark}{f'{near + 1}{mark}' if numbered else ''}{lines[near]}\n")
            if context > 0:
                out.append("--\n")
            total += 1
    return "".join(out), total, False
