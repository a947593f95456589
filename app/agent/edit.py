"""edit_file: exact text replacements, several per call, as llama-server's. Where an ``old_text`` is not in the
file as given, it is looked for with each line's trailing blanks and typographic quotes, dashes and spaces
made plain; the lines an edit does not touch are then written back exactly as they were."""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import Any

from app.agent.tool import Call, InvalidParams, Tool, function

_PLAIN = {**dict.fromkeys("\u2018\u2019\u201a\u201b", "'"), **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
          **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
          **dict.fromkeys("\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000", " ")}
_TABLE = str.maketrans(_PLAIN)


def plain(text: str) -> str:
    """Each line without trailing blanks, typographic characters made ASCII; the line count is kept."""
    return "\n".join(line.rstrip(" \t\r").translate(_TABLE) for line in text.split("\n"))


@dataclass(frozen=True)
class Match:
    edit: int
    start: int
    length: int
    new_text: str


def _edits(call: Call) -> list[tuple[str, str]]:
    edits = call.get("edits", list)
    pairs: list[tuple[str, str]] = []
    for item in edits:
        if not isinstance(item, dict) or not isinstance(item.get("old_text"), str) \
                or not isinstance(item.get("new_text"), str):
            raise InvalidParams(f"edits[{len(pairs)}] must have string old_text and new_text")
        pairs.append((item["old_text"], item["new_text"]))
    return pairs


def _replace(content: str, matches: list[Match], offset: int = 0) -> str:
    for match in reversed(matches):
        start = match.start - offset
        content = content[:start] + match.new_text + content[start + match.length:]
    return content


def _keeping_lines(original: str, base: str, matches: list[Match]) -> str:
    """``base`` (plain) with the matches replaced, each untouched line taken from ``original`` instead."""
    original_lines = original.splitlines(keepends=True)
    starts = [0]
    for line in base.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    groups: list[tuple[int, int, list[Match]]] = []
    for match in matches:
        first = bisect.bisect_right(starts, match.start) - 1
        last = max(first + 1, bisect.bisect_left(starts, match.start + match.length))
        if groups and first < groups[-1][1]:
            groups[-1] = (groups[-1][0], max(groups[-1][1], last), [*groups[-1][2], match])
        else:
            groups.append((first, last, [match]))
    out: list[str] = []
    taken = 0
    for first, last, group in groups:
        out += original_lines[taken:first]
        out.append(_replace(base[starts[first]:starts[last]], group, starts[first]))
        taken = last
    out += original_lines[taken:]
    return "".join(out)


class EditFile(Tool):
    name, display_name, permission_write = "edit_file", "Edit file", True

    def definition(self) -> dict[str, Any]:
        edit = {"type": "object", "properties": {
            "old_text": {"type": "string", "description": "Exact text to find; must be unique in the file and must "
                         "not overlap with other edits"},
            "new_text": {"type": "string", "description": "Text to replace old_text with"}},
            "required": ["old_text", "new_text"]}
        return function(self.name, "Edit a file using exact text replacement. Each edits[].old_text must be unique in "
                        "the file and is matched against the original content, not incrementally. Merge nearby changes "
                        "into one edit instead of overlapping edits. Use write_file to replace the whole file.",
                        {"path": {"type": "string", "description": "Path to the file to edit"},
                         "edits": {"type": "array", "description": "One or more exact text replacements to apply",
                                   "items": edit}}, ("path", "edits"))

    def invoke(self, call: Call) -> dict[str, Any]:
        path, edits = call.get("path", str), _edits(call)
        if not edits:
            return {"error": "\"edits\" must be a non-empty array"}
        for index, (old, _) in enumerate(edits):
            if not old:
                return {"error": f"edits[{index}].old_text must not be empty"}
        raw = call.io.read_file(path)
        if raw is None:
            return {"error": f"failed to open file: {path}"}
        original = raw.decode("utf-8", "replace")
        updated, problem = self._plan(original, edits, path)
        if problem:
            return {"error": problem}
        if updated == original:
            return {"error": "no changes made: the replacement(s) produced identical content"}
        if not call.io.write_file(path, updated.encode("utf-8")):
            return {"error": f"failed to write file: {path}"}
        return {"result": "file edited successfully", "path": path, "edits_applied": len(edits)}

    @staticmethod
    def _plan(original: str, edits: list[tuple[str, str]], path: str) -> tuple[str, str]:
        """``(the new content, "")``, or ``("", the problem)``."""
        plain_original = plain(original)
        fuzzy = False
        for index, (old, _) in enumerate(edits):
            if old in original:
                continue
            if plain(old) not in plain_original:
                return "", f"could not find edits[{index}].old_text in {path}, it must match the file's current " \
                           "content exactly"
            fuzzy = True
        base = plain_original if fuzzy else original
        matches = []
        for index, (old, new) in enumerate(edits):
            count = plain_original.count(plain(old))
            if count > 1:
                return "", f"found {count} occurrences of edits[{index}].old_text in {path}, it must be unique"
            needle = plain(old) if fuzzy else old
            matches.append(Match(index, base.find(needle), len(needle), new))
        matches.sort(key=lambda match: match.start)
        for before, after in itertools.pairwise(matches):
            if before.start + before.length > after.start:
                return "", f"edits[{before.edit}] and edits[{after.edit}] overlap in {path}; merge them into one " \
                           "edit or target disjoint regions"
        return (_keeping_lines(original, base, matches) if fuzzy else _replace(base, matches)), ""
