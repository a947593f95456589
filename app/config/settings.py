"""Server settings: one declaration per option, in sections, parsed once at start-up.

Each option is declared exactly once, as a field of one section (``model.py``, ``compute.py``,
``serving.py``, ``sampling.py``, ``chat.py``, ``http.py``, ``agent.py``, ``vertex.py``, ``router.py``,
``logs.py``): its type, default, flags, environment variable, bounds and help. Each section also owns its
checks (``check``) and the values derived from its options. ``Settings`` is every section in one frozen value, read flat
(``settings.ctx_size``); ``OPTIONS`` is derived from its fields, and the command-line parser, the
environment lookup, ``--help`` and the options page of the docs from ``OPTIONS``. Precedence, highest
first: command-line flag, ``LLAMA_ARG_*`` environment variable, default. Names and defaults follow
llama.cpp's ``llama-server`` so that its users' configuration carries over. Nothing here reads the
environment at import time.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from app.config.agent import AgentSettings
from app.config.chat import ChatSettings
from app.config.compute import ComputeSettings
from app.config.http import HttpSettings
from app.config.logs import LogSettings
from app.config.model import ModelSettings
from app.config.options import Option, SettingsError, convert, scaled
from app.config.placement import PlacementSettings
from app.config.presets import PRESETS, expand_presets
from app.config.router import RouterSettings
from app.config.sampling import SamplingSettings
from app.config.serving import ServingSettings
from app.config.upstream_flags import extensions, treatment, unimplemented
from app.config.vertex import VertexSettings
from app.host.cpus import usable_cpus

# The sections, in the order --help lists them (a dataclass takes its bases' fields last base first).
SECTIONS = (ModelSettings, PlacementSettings, ComputeSettings, ServingSettings, SamplingSettings, ChatSettings,
            HttpSettings, AgentSettings, VertexSettings, RouterSettings, LogSettings)

__all__ = ["OPTIONS", "Option", "Settings", "SettingsError", "build_parser", "parse_settings"]


@dataclass(frozen=True)
class Settings(LogSettings, RouterSettings, VertexSettings, AgentSettings, HttpSettings, ChatSettings, SamplingSettings,
               ServingSettings, ComputeSettings, PlacementSettings, ModelSettings):
    """Every section's options in one value. Build with :func:`parse_settings`."""

    # Not an option: the start-up warnings for llama-server flags given that have no effect here.
    notes: tuple[str, ...] = field(default=())

    @property
    def http_threads(self) -> int:
        if self.threads_http > 0:
            return max(self.threads_http, self.slot_count + 4)
        return max(self.slot_count + 4, usable_cpus() - 1)

    def check(self) -> None:
        """Every section's checks; a SettingsError names the option."""
        for section in SECTIONS:
            section.check(self)


assert Settings.__mro__[1:len(SECTIONS) + 1] == tuple(reversed(SECTIONS))
OPTIONS: tuple[Option, ...] = tuple(
    Option(dest=item.name, default=item.default, **item.metadata["option"]) for item in fields(Settings)
    if "option" in item.metadata
)
HELP_FLAGS = ("-h", "--help", "--usage")  # llama-server's
_OWN_FLAGS = frozenset([*HELP_FLAGS, *PRESETS,
                        *(flag for option in OPTIONS for flag in (*option.flags, *option.negative_flags))])
UNIMPLEMENTED = unimplemented(_OWN_FLAGS)
EXTENSIONS = extensions((option.flags, option.negative_flags, option.env) for option in OPTIONS)
_UPSTREAM_DEST = "upstream:"


def _flag_name(option: Option) -> str:
    return "/".join(option.flags)


def build_parser(prog: str = "python -m app") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        allow_abbrev=False,
        add_help=False,
        description="vertex-llama: llama-server's HTTP API and Vertex AI's prediction protocol "
        "for a GGUF model, served through llama.cpp.",
        epilog="Every option can also be set by the environment variable in brackets; a flag wins. "
        "llama-server's other flags are accepted with a warning, or refused where ignoring them would "
        "change results (docs/configuration.md).",
    )
    parser.add_argument(*HELP_FLAGS, action="help", help="show this help message and exit")
    for option in OPTIONS:
        env_note = f" [env: {option.env}]" if option.env else ""
        default_note = f" (default: {option.default})" if option.default not in (None, "", ()) else ""
        help_text = f"{option.help}{default_note}{env_note}"
        if option.kind == "bool":
            parser.add_argument(*option.flags, dest=option.dest, action="store_const", const="1",
                                default=argparse.SUPPRESS, help=help_text)
            if option.negative_flags:
                parser.add_argument(*option.negative_flags, dest=option.dest, action="store_const",
                                    const="0", default=argparse.SUPPRESS,
                                    help=f"disable {option.flags[-1]}")
        elif option.kind in ("keys", "paths", "texts"):
            parser.add_argument(*option.flags, dest=option.dest, action="append",
                                default=argparse.SUPPRESS, metavar=option.metavar, help=help_text)
        elif option.kind == "scaled":
            parser.add_argument(*option.flags, dest=option.dest, action="append", nargs="+",
                                default=argparse.SUPPRESS, metavar=option.metavar, help=help_text)
        elif option.kind == "range":
            parser.add_argument(*option.flags, dest=option.dest, nargs=2, default=argparse.SUPPRESS,
                                metavar=option.metavar or ("START", "END"), help=help_text)
        else:
            parser.add_argument(*option.flags, dest=option.dest, default=argparse.SUPPRESS,
                                metavar=option.metavar or option.dest.upper(),
                                choices=option.choices or None, help=help_text)
    for index, flag in enumerate(UNIMPLEMENTED):  # accepted, then warned about or refused by parse_settings
        dest = f"{_UPSTREAM_DEST}{index}"
        if flag.values == 0:
            parser.add_argument(*flag.flags, *flag.negative, dest=dest, action="store_const", const="",
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        else:
            parser.add_argument(*flag.flags, dest=dest, nargs=None if flag.values == 1 else flag.values,
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def _upstream_notes(namespace: dict[str, Any], environ: Mapping[str, str]) -> tuple[str, ...]:
    """Warnings for the llama-server flags given (or their environment variables) that have no
    effect here; a SettingsError for one that is refused."""
    notes = []
    for index, flag in enumerate(UNIMPLEMENTED):
        given = f"{_UPSTREAM_DEST}{index}" in namespace
        where = flag.name if given else f"environment {flag.env}"
        if not given and not (flag.env and environ.get(flag.env, "") != ""):
            continue
        how = treatment(flag)
        assert how is not None, f"no treatment for llama-server's {flag.name}"
        if how.action == "refuse":
            raise SettingsError(f"{where}: {how.reason}")
        notes.append(f"{where}: accepted, no effect here: {how.reason}")
    return tuple(notes)


def _load_flag_notes(settings: Settings) -> tuple[str, ...]:
    """The pinned llama.cpp replaced --mlock and --no-mmap by --load-mode: say how they were taken."""
    if not settings.mlock and settings.mmap:
        return ()
    given = " and ".join(name for name, on in (("--mlock", settings.mlock), ("--no-mmap", not settings.mmap)) if on)
    if settings.load_mode is not None:
        return (f"{given}: replaced by --load-mode in llama.cpp; ignored, --load-mode {settings.load_mode} wins",)
    return (f"{given}: replaced by --load-mode in llama.cpp; taken as --load-mode {settings.model_load_mode}",)


_KNOWN_FLAGS = _OWN_FLAGS | {name for flag in UNIMPLEMENTED for name in (*flag.flags, *flag.negative)}


def llama_spelling(argv: Sequence[str]) -> list[str]:
    """``argv`` with llama-server's spelling rule applied: a long flag may use ``_`` for ``-``
    (common/arg.cpp replaces them in every ``--`` argument), so ``--backend_sampling`` is
    ``--backend-sampling``. Only a word that then names a flag is changed, never a value. Then its
    presets expand in place (app/config/presets.py)."""
    spelled = []
    for word in argv:
        name, equals, value = word.partition("=")
        if word.startswith("--") and "_" in name and name not in _KNOWN_FLAGS:
            candidate = name.replace("_", "-")
            if candidate in _KNOWN_FLAGS:
                word = candidate + equals + value
        spelled.append(word)
    return expand_presets(spelled)


def parse_settings(
    argv: Sequence[str],
    environ: Mapping[str, str],
    error: Callable[[str], Any] | None = None,
) -> Settings:
    """Resolve every option from ``argv``, then ``environ``, then its default.

    A bad flag or value calls ``error`` (argparse's, by default, which exits with status 2).
    """
    parser = build_parser()
    report = error or parser.error
    namespace = vars(parser.parse_args(llama_spelling(argv)))
    values: dict[str, Any] = {}
    try:
        for option in OPTIONS:
            if option.dest in namespace:
                raw = namespace[option.dest]
                if option.kind == "texts":
                    values[option.dest] = tuple(text for text in raw if text)
                elif option.kind in ("keys", "paths"):
                    values[option.dest] = tuple(
                        key for chunk in raw for key in convert(option, chunk, _flag_name(option))
                    )
                elif option.kind == "scaled":
                    values[option.dest] = tuple(pair for given in raw for pair in scaled(given, _flag_name(option)))
                elif option.kind == "range":
                    values[option.dest] = convert(option, " ".join(raw), _flag_name(option))
                else:
                    values[option.dest] = convert(option, raw, _flag_name(option))
            elif option.secret and option.kind == "keys" and option.env and environ.get(option.env) == "":
                raise SettingsError(f"environment {option.env}: set but empty (unset it to serve without keys)")
            elif (name := next((n for n in (option.env, *option.env_aliases) if n and environ.get(n, "") != ""),
                               None)) is not None:
                values[option.dest] = convert(option, environ[name], f"environment {name}")
            else:
                values[option.dest] = option.default
        values["notes"] = _upstream_notes(namespace, environ)
        settings = Settings(**values)
        settings.check()
        settings = replace(settings, notes=settings.notes + _load_flag_notes(settings))
    except SettingsError as exc:
        report(str(exc))
        raise
    return settings


def secret_environment() -> frozenset[str]:
    """The environment variables that hold secrets (``Option.secret``): never handed to a tool's process."""
    return frozenset(name for option in OPTIONS if option.secret
                     for name in (option.env, *option.env_aliases) if name)


def settings_fields() -> tuple[str, ...]:
    return tuple(item.name for item in fields(Settings) if "option" in item.metadata)
