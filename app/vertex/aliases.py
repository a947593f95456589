"""``@requestFormat`` aliases, derived from the route table the way llama-server derives them.

``derive_alias`` follows llama-server's ``path_to_gcp_format``: drop a leading ``/v1``, drop the
leading ``/``, camel-case at ``/``, ``-`` and ``_``, stop at a path parameter (``:``). Unlike
llama-server (which iterates a hash map), the table is deterministic:

    Rule: routes are taken in table order and the first route to claim an alias keeps it.

So ``completions`` is the native ``POST /completions`` (not ``/v1/completions``), and ``slots`` is
``GET /slots`` (not ``POST /slots/:id_slot``). A route that loses its alias to a different handler
is still reachable through its literal path as ``@requestFormat`` (``"/v1/completions"``); every
such collision is reported at start-up. As in llama-server, a path is bound to the first method
registered for it: ``POST /props`` is not reachable through predict (``GET /props`` is).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.protocol.api import Route


def derive_alias(path: str) -> str:
    if len(path) > 3 and path.startswith("/v1"):
        path = path[3:]
    path = path.removeprefix("/")
    out: list[str] = []
    upper_next = False
    for char in path:
        if char == ":":
            break
        if char in "/-_":
            upper_next = True
            continue
        out.append(char.upper() if upper_next else char)
        upper_next = False
    return "".join(out)


@dataclass(frozen=True)
class AliasCollision:
    alias: str
    winner: Route
    loser: Route

    def describe(self) -> str:
        return (
            f"@requestFormat {self.alias!r} -> {self.winner.method} {self.winner.path} ({self.winner.name}); "
            f"{self.loser.method} {self.loser.path} ({self.loser.name}) derives the same alias and is "
            f"reachable as @requestFormat {self.loser.path!r}"
        )


class AliasTable:
    """Resolves an ``@requestFormat`` value: an alias first, then a literal path."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self.by_alias: dict[str, Route] = {}
        self.by_path: dict[str, Route] = {}
        self.collisions: list[AliasCollision] = []
        self.shadowed: list[Route] = []
        for route in routes:
            if self.by_path.setdefault(route.path, route) is not route:
                self.shadowed.append(route)
                continue
            alias = derive_alias(route.path)
            if not alias:
                continue
            winner = self.by_alias.setdefault(alias, route)
            if winner is not route and winner.name != route.name:
                self.collisions.append(AliasCollision(alias, winner, route))

    def resolve(self, request_format: str) -> Route | None:
        return self.by_alias.get(request_format) or self.by_path.get(request_format)

    def listing(self) -> dict[str, Any]:
        """The table as JSON: every alias with its route, the collisions (and how the losing route is
        still reached), and the routes no ``@requestFormat`` reaches."""
        return {
            "aliases": [{"alias": alias, **_route_json(route), "summary": route.summary, "streams": route.streams}
                        for alias, route in self.by_alias.items()],
            "collisions": [{"alias": c.alias, "winner": _route_json(c.winner), "loser": _route_json(c.loser),
                            "loser_reachable_as": c.loser.path, "message": c.describe()} for c in self.collisions],
            "shadowed": [_route_json(route) for route in self.shadowed],
        }


def _route_json(route: Route) -> dict[str, str]:
    return {"method": route.method, "path": route.path, "name": route.name}
