"""Bounded repetition in JSON-schema grammars, written as GBNF's counted repetition ``x{m,n}``.

llama-cpp-python's schema converter writes ``maxLength``, ``maxItems`` and a pattern's ``{m,n}`` as
``n - m`` nested optional groups, ``(x (x (x)?)?)?``, and llama.cpp's grammar parser recurses once
per group: a string schema with ``maxLength: 20000`` overflowed the engine thread's stack and took
the worker down (SIGSEGV). ``counted_repetition`` replaces the converter's ``_build_repetition``
(``app/engine/llama/bindings.py`` installs it) and writes what llama.cpp's own C++ converter writes:
``x{m,n}``, which the parser expands into rules without recursing.

llama.cpp's parser refuses a repetition that would generate more than ``REPETITION_LIMIT`` rules.
So, as llama-server's converter does, an upper bound above it is taken as no bound (``x{m,}``: the
request's token budget still ends the answer), and a lower bound above it is refused by name.
"""

from __future__ import annotations

# llama.cpp's MAX_REPETITION_THRESHOLD (src/llama-grammar.cpp): the most rules one repetition may make.
REPETITION_LIMIT = 2000


def counted_repetition(
    item_rule: str,
    min_items: int,
    max_items: int | None,
    separator_rule: str | None = None,
    item_rule_is_literal: bool = False,  # the converter's signature; a quoted literal repeats as any item
) -> str:
    """GBNF for ``min_items`` to ``max_items`` (``None``: no limit) of ``item_rule``, each after the
    first preceded by ``separator_rule``; ValueError for bounds that are not counts."""
    _check_bounds(min_items, max_items)
    if max_items is not None and max_items > REPETITION_LIMIT:
        max_items = None
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return f"{item_rule}?"
    if not separator_rule:
        return _counted(item_rule, min_items, max_items)
    rest = _counted(f"({separator_rule} {item_rule})", max(0, min_items - 1),
                    None if max_items is None else max_items - 1)
    sequence = f"{item_rule} {rest}".rstrip()
    return f"({sequence})?" if min_items == 0 else sequence


def _counted(item: str, low: int, high: int | None) -> str:
    if high == 0:
        return ""
    if high is None:
        return {0: f"{item}*", 1: f"{item}+"}.get(low, f"{item}{{{low},}}")
    if low == high == 1:
        return item
    if (low, high) == (0, 1):
        return f"{item}?"
    return f"{item}{{{low},{high}}}"


def _check_bounds(min_items: object, max_items: object) -> None:
    if not isinstance(min_items, int) or isinstance(min_items, bool) or min_items < 0:
        raise ValueError(f"a minimum length or count must be a whole number of at least 0, not {min_items!r}")
    if min_items > REPETITION_LIMIT:
        raise ValueError(f"a minimum length or count of {min_items} is above the limit of {REPETITION_LIMIT} "
                         "(minLength, minItems, minContains or a pattern's {m,n})")
    if max_items is None:
        return
    if not isinstance(max_items, int) or isinstance(max_items, bool) or max_items < min_items:
        raise ValueError(f"a maximum length or count must be a whole number of at least the minimum "
                         f"({min_items}), not {max_items!r}")
