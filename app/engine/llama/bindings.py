"""llama-cpp-python's ctypes bindings, without the rest of its package.

``import llama_cpp`` runs the package's ``__init__``, which imports its high-level ``Llama`` class
and with it numpy, jinja2, diskcache and its chat formats: 0.1-0.2 s before a model can start to
load, spent on code this server never calls. It needs only the bindings (``llama_cpp.llama_cpp``,
``llama_cpp.mtmd_cpp``) and the JSON-schema grammar converter, which are submodules. So the package
is registered first without running its ``__init__``; the first attribute asked of the package itself
(``llama_cpp.Llama``, by any other code in the process) runs it then, so that code sees it whole.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import types
from typing import Any

PACKAGE = "llama_cpp"
DISTRIBUTION = "llama-cpp-python"


class _DeferredPackage(types.ModuleType):
    """The package module, its ``__init__`` not yet run; it runs on the first missing attribute."""

    def __getattr__(self, name: str) -> Any:
        if self.__dict__.get("_deferred_init_done"):
            raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")
        self.__dict__["_deferred_init_done"] = True
        spec = self.__spec__
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(self)
        return getattr(self, name)


def _register_package() -> None:
    if PACKAGE in sys.modules:  # imported already (whole, or registered by an earlier call)
        return
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None:
        raise ImportError(f"{DISTRIBUTION} is not installed")
    package = importlib.util.module_from_spec(spec)  # __path__, __spec__, __file__ set; nothing run
    package.__class__ = _DeferredPackage
    sys.modules[PACKAGE] = package


_register_package()

import llama_cpp.llama_cpp as lc  # noqa: E402  (the package is registered above)
import llama_cpp.llama_grammar as llama_grammar  # noqa: E402
import llama_cpp.mtmd_cpp as mt  # noqa: E402
from llama_cpp.llama_grammar import json_schema_to_gbnf  # noqa: E402

from app.engine.llama.repetition import counted_repetition  # noqa: E402

# The converter's bounded repetition nests one group per item, which llama.cpp's parser recurses
# into (a large maxLength crashed the worker): replaced by counted repetition (repetition.py).
# The converter calls it by its module-global name; tests/unit/test_grammar_limits.py checks the result.
llama_grammar._build_repetition = counted_repetition


def bindings_version() -> str:
    """llama-cpp-python's version (its package ``__version__``, read without running the package)."""
    return importlib.metadata.version(DISTRIBUTION)


__all__ = ["bindings_version", "json_schema_to_gbnf", "lc", "mt"]
