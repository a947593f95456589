"""A child instance's command line: the router's own flags (less those the router keeps to itself)
and a preset's options, written as the flags they name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.config.options import FALSE, TRUE, Option
from app.config.settings import OPTIONS, UNIMPLEMENTED, SettingsError, llama_spelling

# What the router owns and every child gets a value of its own for (upstream: unset_reserved_args and the
# host, port and alias the router sets): where it listens, its keys and TLS, its model, the router's flags.
RESERVED = frozenset({
    "host", "port", "reuse_port", "api_keys", "api_key_file", "ssl_key_file", "ssl_cert_file", "api_prefix",
    "alias", "model", "mmproj", "model_url", "mmproj_url", "hf_repo", "hf_file", "models_dir", "models_preset",
    "models_max", "models_autoload", "grpc_port",  # the router serves gRPC; a child would take its port
    # agent mode: the router runs the tools, the MCP servers and the CORS proxy; a child starts none
    "tools", "tools_runtime", "mcp_servers_config", "mcp_servers_json", "agent", "ui_mcp_proxy", "tools_root",
    "tools_max_timeout", "tools_max_output", "tools_ssh_config",
})


@dataclass(frozen=True)
class Flag:
    """How a flag is written: the option it sets (None: one of llama-server's flags not implemented here),
    how many values follow it (-1: one or more) and whether it turns its option off."""

    flag: str
    dest: str | None
    values: int
    negative: bool = False


def _flag_table() -> dict[str, Flag]:
    table: dict[str, Flag] = {}
    for option in OPTIONS:
        values = {"bool": 0, "scaled": -1, "range": 2}.get(option.kind, 1)
        for flag in option.flags:
            table[flag] = Flag(option.flags[-1], option.dest, values)
        for flag in option.negative_flags:
            table[flag] = Flag(option.negative_flags[-1], option.dest, 0, negative=True)
    for upstream in UNIMPLEMENTED:
        for flag in upstream.flags:
            table[flag] = Flag(upstream.name, None, upstream.values)
        for flag in upstream.negative:
            table[flag] = Flag(max(upstream.negative, key=len), None, 0, negative=True)
    return table


FLAGS = _flag_table()


def without_reserved(argv: Sequence[str]) -> list[str]:
    """``argv`` less every flag of a RESERVED option and its values."""
    kept: list[str] = []
    words = llama_spelling(argv)
    index = 0
    while index < len(words):
        word = words[index]
        name, equals, _ = word.partition("=")
        flag = FLAGS.get(name) if word.startswith("-") else None
        count = 1
        if flag is not None and not equals:
            if flag.values == -1:
                while index + count < len(words) and not words[index + count].startswith("-"):
                    count += 1
            else:
                count += flag.values
        if flag is None or flag.dest not in RESERVED:
            kept.extend(words[index:index + count])
        index += count
    return kept


def _preset_names() -> dict[str, Flag]:
    """Every name a preset key may use: a flag without its dashes (long or short) or an environment name."""
    names = {flag.lstrip("-"): spec for flag, spec in FLAGS.items()}
    for option in OPTIONS:
        for env in (option.env, *option.env_aliases):
            if env:
                names[env] = FLAGS[option.flags[0]]
    for upstream in UNIMPLEMENTED:
        if upstream.env:
            names[upstream.env] = FLAGS[upstream.flags[0]]
    return names


PRESET_NAMES = _preset_names()
OPTION_OF = {option.dest: option for option in OPTIONS}


def preset_key(key: str) -> Flag:
    """The flag a preset key names; a SettingsError for a key that names none."""
    spec = PRESET_NAMES.get(key) or PRESET_NAMES.get(key.lower())
    if spec is None:
        raise SettingsError(f"{key!r} is not an option of this server")
    return spec


def dest_of(key: str) -> str | None:
    """The option a preset key sets (None for one of llama-server's flags not implemented here)."""
    return preset_key(key).dest


def as_flags(key: str, value: str) -> list[str]:
    """One preset entry as command-line words: ``jinja = true`` is ``--jinja``, ``c = 4096`` is
    ``--ctx-size 4096``, ``LLAMA_ARG_CACHE_RAM = 0`` is ``--cache-ram 0``."""
    spec = preset_key(key)
    if spec.values != 0:
        return [spec.flag, *(value.split() if spec.values != 1 else [value])]
    lowered = value.strip().lower()
    if lowered not in TRUE | FALSE:
        raise SettingsError(f"{key}: {value!r} is not true or false")
    option: Option | None = OPTION_OF.get(spec.dest) if spec.dest else None
    if option is None:  # one of llama-server's flags not implemented here: given as written when true
        return [spec.flag] if lowered in TRUE else []
    if (lowered in TRUE) != spec.negative:
        return [option.flags[-1]]
    return [option.negative_flags[-1]] if option.negative_flags else []


def preset_argv(options: Mapping[str, str]) -> list[str]:
    """A preset's options (key -> value, in order) as command-line words."""
    return [word for key, value in options.items() for word in as_flags(key, value)]
