"""The limits a grammar must keep before it reaches llama.cpp, checked when a job is submitted.

llama.cpp's GBNF parser recurses once per nested group and its grammar engine once per rule it
expands at the head of a parse stack, with no depth limit of their own: a grammar nested some
20,000 groups deep (or a chain of that many rules, each starting with the next) overflows the engine
thread's stack and kills the worker with every request in it. Every grammar a request can bring
(``grammar``, one made from ``json_schema``, ``response_format`` or tools, the server's default) is
measured here first, and one past a limit is refused (400) before any C code sees it.

The limits are far above what a real grammar needs: JSON-schema grammars nest a few groups per
level of the schema (bounded repetition is counted, not nested: app/engine/llama/repetition.py),
and llama.cpp's own parser refuses repetitions that would make more than 2,000 rules.
"""

from __future__ import annotations

import re

from app.engine.errors import InvalidJobError

MAX_GROUP_DEPTH = 256  # groups ``( ... )`` nested inside one another
MAX_RULE_CHAIN = 2000  # rules on one path of references (each rule of a cycle counted)

# What can hide a parenthesis or a rule name: string literals, character classes and comments.
_SKIPPED = r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|#[^\n]*'
_GROUPS = re.compile(rf"{_SKIPPED}|[()]")
_RULE = re.compile(r"^[ \t]*([a-zA-Z0-9_-]+)[ \t]*::=", re.MULTILINE)
_REFERENCE = re.compile(r"[a-zA-Z0-9_-]+")


def check_grammar(text: str) -> None:
    """InvalidJobError if ``text`` nests groups or chains rules past the limits."""
    if not text:
        return
    depth = _group_depth(text)
    if depth > MAX_GROUP_DEPTH:
        raise InvalidJobError(f"the grammar nests groups {depth} deep; the limit is {MAX_GROUP_DEPTH} "
                              "(a JSON schema's bounded lengths and counts are written as x{m,n})")
    if text.count("::=") <= MAX_RULE_CHAIN:  # no path can hold more rules than there are
        return
    chain = rule_chain(text)
    if chain > MAX_RULE_CHAIN:
        raise InvalidJobError(f"the grammar has a chain of {chain} rules, each referring to the next; the limit "
                              f"is {MAX_RULE_CHAIN}")


def _group_depth(text: str) -> int:
    depth = deepest = 0
    for match in _GROUPS.finditer(text):
        token = match.group()
        if token == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif token == ")":
            depth = max(0, depth - 1)
    return deepest


def rule_chain(text: str) -> int:
    """An upper bound on how many rules llama.cpp may expand one inside another before it reads a
    character: the longest path of references, a cycle's rules all counted (reading no character,
    a rule cannot come back to itself: llama.cpp refuses left recursion)."""
    bodies = _rule_bodies(text)
    edges = {name: sorted({ref for ref in _REFERENCE.findall(body) if ref in bodies}) for name, body in bodies.items()}
    components = _strongly_connected(edges)
    component_of = {name: index for index, members in enumerate(components) for name in members}
    longest: list[int] = []
    for members in components:  # Tarjan's order: a component comes after every one it refers to
        below = {component_of[ref] for name in members for ref in edges[name]} - {len(longest)}
        longest.append(len(members) + max((longest[index] for index in below), default=0))
    return max(longest, default=0)


def _rule_bodies(text: str) -> dict[str, str]:
    """Each rule's definition, with literals, classes and comments blanked out."""
    blanked = re.sub(_SKIPPED, lambda match: " " * len(match.group()), text)
    heads = list(_RULE.finditer(blanked))
    bodies: dict[str, str] = {}
    for index, head in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else len(blanked)
        bodies[head.group(1)] = bodies.get(head.group(1), "") + " " + blanked[head.end():end]
    return bodies


def _strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (a grammar's chains are what is being
    measured, so recursion would hit Python's own limit), each after the components it reaches."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            name, next_edge = work.pop()
            if next_edge == 0:
                index[name] = low[name] = len(index)
                stack.append(name)
                on_stack.add(name)
            if next_edge < len(edges[name]):
                work.append((name, next_edge + 1))
                child = edges[name][next_edge]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[name] = min(low[name], index[child])
                continue
            if low[name] == index[name]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == name:
                        break
                components.append(members)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[name])
    return components
