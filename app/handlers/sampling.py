"""The sampling fields of a request, as overrides of ``SamplingParams``.

``SamplingParams`` (app/engine/types.py) is the one declaration of the sampling fields and their
defaults; the server's own defaults (``--temp``, ``--top-k``, ...) replace some of them
(``Settings.sampling_defaults``). A request may override any field: the wire schema's fields are
derived from the dataclass (each optional, with its bounds from ``BOUNDS``), and the translation is
``replace(defaults, **given)`` followed by llama-server's clamps. The few fields whose wire form
differs (seed, logit bias, sampler order, DRY breakers, grammar, probabilities) are translated by
the functions below.
"""

from __future__ import annotations

import math
import typing
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.engine import RANDOM_SEED, SamplingParams
from app.engine.types import SAMPLER_LETTERS, SAMPLER_NAMES, sampler_names
from app.protocol.errors import InvalidRequestError

# Fields whose wire form differs from the engine's; the request schema declares them itself.
TRANSLATED = frozenset({"seed", "logit_bias", "samplers", "dry_sequence_breakers", "grammar", "n_probs"})
DIRECT = tuple(item.name for item in fields(SamplingParams) if item.name not in TRANSLATED)
# Validation bounds (a 400 outside them).
BOUNDS: dict[str, dict[str, Any]] = {
    "repeat_last_n": {"ge": -1}, "min_keep": {"ge": 0}, "dry_allowed_length": {"ge": 0},
    "dry_penalty_last_n": {"ge": -1},
}
# llama-server's clamps (a value outside is brought inside, not refused).
CLAMPS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, math.inf), "top_k": (0, math.inf), "top_p": (0.0, 1.0), "min_p": (0.0, 1.0),
    "xtc_probability": (0.0, 1.0), "xtc_threshold": (0.0, 1.0), "mirostat": (0, 2),
    "adaptive_decay": (0.0, 0.99),
}
# Below these floors a value means "the default" (llama-server: a DRY base under 1 is ignored).
FLOORS: dict[str, float] = {"dry_base": 1.0}


def _overrides_model() -> type[BaseModel]:
    hints = typing.get_type_hints(SamplingParams)
    definitions: dict[str, Any] = {
        name: (hints[name] | None, Field(None, **BOUNDS.get(name, {}))) for name in DIRECT
    }
    return create_model("SamplingOverrides", __config__=ConfigDict(extra="allow"), **definitions)


if TYPE_CHECKING:
    SamplingOverrides = BaseModel
else:
    SamplingOverrides = _overrides_model()


def overridden(defaults: SamplingParams, body: BaseModel) -> SamplingParams:
    """``defaults`` with every direct field the request gave, clamped as llama-server clamps."""
    given = {name: value for name in DIRECT if (value := getattr(body, name)) is not None}
    for name, floor in FLOORS.items():
        if name in given and given[name] < floor:
            del given[name]
    for name, (low, high) in CLAMPS.items():
        if name in given:
            given[name] = type(given[name])(max(low, min(high, given[name])))
    return replace(defaults, **given)


def seed_of(requested: int | None, default: int) -> int:
    seed = default if requested is None else requested
    return RANDOM_SEED if seed < 0 else seed


def sampler_order(raw: list[str] | str) -> tuple[str, ...]:
    """llama-server's ``samplers``: a list of names, or a string of one letter per sampler."""
    names = sampler_names(raw)
    if names is None:
        known = ", ".join(sorted(SAMPLER_NAMES))
        raise InvalidRequestError(f"Field 'samplers': unknown sampler in {raw!r} (known: {known}, or letters "
                                  f"{''.join(SAMPLER_LETTERS)})")
    return names
