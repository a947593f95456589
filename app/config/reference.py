"""The documentation's generated parts, made from the one settings declaration (``OPTIONS``) and
llama-server's flag table: the options reference page and the configuration page's list of
llama-server's other flags. ``scripts/docs.py`` writes them; ``tests/unit/test_docs.py`` checks that
the checked-in pages hold exactly what these functions make."""

from __future__ import annotations

from typing import Any

from app.config.settings import EXTENSIONS, OPTIONS, UNIMPLEMENTED, Option
from app.config.upstream_flags import readme_section

OPTIONS_PAGE = "docs/reference/options.md"
CONFIGURATION_PAGE = "docs/configuration.md"
UPSTREAM_START = "<!-- upstream-flags:start"
UPSTREAM_END = "<!-- upstream-flags:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def _flags(option: Option) -> str:
    metavar = option.metavar if isinstance(option.metavar, str) else " ".join(option.metavar or ())
    flags = _code(option.flags) + (f" `{metavar}`" if metavar and option.kind != "bool" else "")
    return flags + (f" / {_code(option.negative_flags)}" if option.negative_flags else "")


def _environment(option: Option) -> str:
    names = [name for name in (option.env, *option.env_aliases) if name]
    return _code(names)


def _default(value: Any, option: Option) -> str:
    if option.kind == "bool":
        return "on" if value else "off"
    if value in (None, "", ()):
        return "none"
    return f"`{', '.join(map(str, value)) if isinstance(value, tuple) else value}`"


def _meaning(option: Option) -> str:
    notes = [option.help]
    if option.choices:
        notes.append(f"one of {_code(option.choices)}")
    if option.minimum is not None:
        notes.append(f"at least {option.minimum:g}")
    if option.maximum is not None:
        notes.append(f"at most {option.maximum:g}")
    if option.kind in ("keys", "paths"):
        notes.append("repeatable, or comma-separated")
    if option.secret:
        notes.append("a secret: never logged")
    return "; ".join(notes)


def options_page() -> str:
    """Every option of ``python -m app``: flags, environment variables, default and meaning."""
    lines = [
        "# Every option",
        "",
        "<!-- Generated from app/config/settings.py by scripts/docs.py; edit the declaration, not this page. -->",
        "",
        f"The {len(OPTIONS)} options of `python -m app`, in the order `--help` lists them. Each is set by its flag "
        "or its environment variable (a flag wins over the environment, which wins over the default). The "
        "[configuration guide](../configuration.md) explains the ones that matter most and lists llama-server's "
        "flags this server warns about or refuses.",
        "",
        "| flags | environment | default | meaning |",
        "|---|---|---|---|",
    ]
    lines += [f"| {_flags(option)} | {_environment(option)} | {_default(option.default, option)} | "
              f"{_cell(_meaning(option))} |" for option in OPTIONS]
    return "\n".join(lines) + "\n"


def upstream_flags_section() -> str:
    """The configuration page's list of llama-server's flags that are not implemented here."""
    return readme_section(UNIMPLEMENTED, EXTENSIONS)


def with_upstream_section(page: str) -> str:
    """``page`` (the configuration page) with its generated list made anew."""
    start = page.index("\n", page.index(UPSTREAM_START)) + 1
    return page[:start] + upstream_flags_section() + page[page.index(UPSTREAM_END):]
