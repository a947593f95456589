"""How an option is declared: ``Option`` (its flags, environment name, kind, default, bounds, help),
``option()`` (a settings field carrying one), and the conversions every option shares. The sections
(``model.py``, ``serving.py``, ...) declare their options with it; ``settings.py`` composes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.engine.types import KV_OVERRIDE_TYPES, KvOverride

Kind = Literal["str", "int", "float", "bool", "keys", "choice", "paths", "scaled", "texts", "range"]

TRUE = frozenset({"true", "1", "on", "enabled", "yes"})
FALSE = frozenset({"false", "0", "off", "disabled", "no"})


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names it."""


@dataclass(frozen=True)
class Option:
    """One setting: its flags, environment name, kind, default and help text."""

    dest: str
    flags: tuple[str, ...]
    kind: Kind
    default: Any
    help: str
    env: str | None = None
    negative_flags: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    metavar: str | tuple[str, ...] | None = None
    env_aliases: tuple[str, ...] = ()  # older names of the environment variable, still read
    secret: bool = False  # never written to a log (app/server/cli.py's public_settings); keys of it fail closed


def option(flags: tuple[str, ...], kind: Kind, default: Any, help: str, **extra: Any) -> Any:
    """A Settings field and its declaration: the field's name is the option's ``dest``, its default
    the option's default; the rest (flags, kind, help, env, ...) rides in the field's metadata."""
    return field(default=default, metadata={"option": {"flags": flags, "kind": kind, "help": help, **extra}})


def convert(option: Option, raw: str, where: str) -> Any:
    if option.secret and option.kind == "keys" and any(not key.strip() for key in raw.split(",")):
        # a blank key must not turn authentication off (fail closed)
        raise SettingsError(f"{where}: an empty or blank key (keys are comma-separated, and none may be empty)")
    try:
        if option.kind == "int":
            value: Any = int(raw)
        elif option.kind == "float":
            value = float(raw)
        elif option.kind == "bool":
            lowered = raw.strip().lower()
            if lowered not in TRUE | FALSE:
                raise ValueError(raw)
            value = lowered in TRUE
        elif option.kind in ("keys", "paths"):
            value = tuple(key.strip() for key in raw.split(",") if key.strip())
        elif option.kind == "texts":
            value = (raw,) if raw else ()
        elif option.kind == "range":  # two integers: START END (or START,END from the environment)
            parts = raw.replace(",", " ").split()
            if len(parts) != 2:
                raise ValueError(raw)
            value = (int(parts[0]), int(parts[1]))
        elif option.kind == "choice":
            if raw not in option.choices:
                raise ValueError(raw)
            value = raw
        else:
            value = raw
    except ValueError:
        expected = f"one of {', '.join(option.choices)}" if option.choices else f"a {option.kind}"
        raise SettingsError(f"{where}: invalid value {raw!r} (expected {expected})") from None
    if option.minimum is not None and isinstance(value, int | float) and value < option.minimum:
        raise SettingsError(f"{where}: {value} is below the minimum {option.minimum:g}")
    if option.maximum is not None and isinstance(value, int | float) and value > option.maximum:
        raise SettingsError(f"{where}: {value} is above the maximum {option.maximum:g}")
    return value


def scaled(given: list[str], where: str) -> list[tuple[str, float]]:
    """``--lora-scaled``'s values: llama-server's ``FNAME:SCALE,...``, or ``FNAME SCALE``."""
    if len(given) == 2 and ":" not in given[0]:
        items = [given[0] + ":" + given[1]]
    else:
        items = [item for value in given for item in value.split(",") if item]
    pairs = []
    for item in items:
        path, sep, scale = item.rpartition(":")
        try:
            if not sep or not path:
                raise ValueError(item)
            pairs.append((path, float(scale)))
        except ValueError:
            raise SettingsError(f"{where}: {item!r} is not FNAME:SCALE (a file and a number)") from None
    return pairs


def kv_override(item: str) -> KvOverride:
    """One ``--override-kv`` item, parsed as llama.cpp's ``string_parse_kv_override`` does."""
    key, sep, typed = item.partition("=")
    kind, colon, raw = typed.partition(":")
    problem = None
    if not sep or not colon or not key:
        problem = "is not KEY=TYPE:VALUE"
    elif len(key.encode()) >= 128:
        problem = "has a key of 128 bytes or more"
    elif kind not in KV_OVERRIDE_TYPES:
        problem = f"has type {kind!r} (expected {', '.join(KV_OVERRIDE_TYPES)})"
    else:
        try:
            if kind == "int":
                return KvOverride(key, int(raw))
            if kind == "float":
                return KvOverride(key, float(raw))
            if kind == "bool":
                if raw not in ("true", "false"):
                    raise ValueError(raw)
                return KvOverride(key, raw == "true")
            if len(raw.encode()) >= 128:
                raise ValueError(raw)
            return KvOverride(key, raw)
        except ValueError:
            problem = f"has a value that is not a {kind}" + (" (true or false)" if kind == "bool" else
                                                             " under 128 bytes" if kind == "str" else "")
    raise SettingsError(f"--override-kv: {item!r} {problem}")


def parse_gpu_layers(flag: str, value: str) -> int:
    """A layer count as llama.cpp takes it (``auto``/``all``: every layer, -1); a SettingsError names ``flag``."""
    if value in ("auto", "all"):
        return -1
    try:
        return int(value)
    except ValueError:
        raise SettingsError(f"{flag}: invalid value {value!r} (expected a number, auto or all)") from None
