"""A package's names imported on first use (PEP 562), for the packages whose ``__init__`` must stay
cheap: the server's master process reads its settings without the scheduler, and the worker sets up
llama.cpp on one thread while another imports the engine."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name in ``homes`` from its module, imported when the
    name is first asked for."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    return __getattr__
