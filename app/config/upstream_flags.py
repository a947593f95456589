"""llama-server's flags that this container does not implement, so that an existing llama-server
command line starts here: each is accepted with a start-up warning saying why it has no effect, or
refused with the reason where ignoring it would silently change results.

The flags themselves (names, values, environment variables) are app/config/upstream_flags.json, written by
scripts/upstream_flags.py from common/arg.cpp of the pinned llama.cpp. The flags that
``app/config/settings.py`` declares are implemented; every other entry gets its treatment here, from the
rules of ``treatment`` (one per kind of flag) and the ``TREATMENTS`` table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

TABLE = Path(__file__).with_name("upstream_flags.json")


@dataclass(frozen=True)
class UpstreamFlag:
    flags: tuple[str, ...]
    negative: tuple[str, ...]
    values: int  # how many values the flag takes
    env: str | None
    sampling: bool
    speculative: bool
    removed: str | None  # llama-server refuses it too, with this advice

    @property
    def name(self) -> str:
        return max(self.flags, key=len)


@dataclass(frozen=True)
class Treatment:
    action: Literal["warn", "refuse"]
    reason: str


@cache
def upstream_flags() -> tuple[UpstreamFlag, ...]:
    return tuple(UpstreamFlag(tuple(item["flags"]), tuple(item["negative"]), item["values"], item["env"],
                              item["sampling"], item["speculative"], item["removed"])
                 for item in json.loads(TABLE.read_text()))


def _warn(reason: str) -> Treatment:
    return Treatment("warn", reason)


def _refuse(reason: str) -> Treatment:
    return Treatment("refuse", reason)


RESULTS = "not implemented here, and ignoring it would change the model's output"

TREATMENTS: dict[str, Treatment] = {
    # context, KV cache and RoPE: the numbers the model computes
    "--escape": _warn("escapes apply to the command line's --prompt (llama-cli's); llama-server ignores it too"),
    # memory, placement and loading: speed and memory only
    "--defrag-thold": _warn("deprecated in llama.cpp; it has no effect there either"),
}


def treatment(flag: UpstreamFlag) -> Treatment | None:
    """How an unimplemented flag is taken; None for a flag no rule covers (a test keeps that empty)."""
    if flag.removed is not None:
        return _refuse(f"removed from llama-server: {flag.removed}")
    if flag.speculative or any("draft" in name for name in flag.flags):
        return _speculation_treatment(flag)
    for name in (*flag.flags, *flag.negative):
        if name in TREATMENTS:
            return TREATMENTS[name]
    return None


def _speculation_treatment(flag: UpstreamFlag) -> Treatment | None:
    """The --spec-* settings this server's speculative decoding (app/engine/speculative.py) has no use for
    (as llama-server has none); None for one no rule covers."""
    name = flag.name
    if name == "--spec-ngram-simple-min-hits":
        return _warn("ngram-simple takes the latest match of the n-gram, as llama.cpp's ngram-simple does (it reads "
                     "no hit count there either)")
    if name == "--spec-draft-p-split":
        return _warn("the pinned llama.cpp parses it and reads it nowhere (no draft tree there): a no-op in "
                     "llama-server too")
    return None


def unimplemented(declared: Iterable[str]) -> tuple[UpstreamFlag, ...]:
    """The upstream flags that none of ``declared`` (this server's flags) implements."""
    ours = set(declared)
    return tuple(flag for flag in upstream_flags() if not ours & {*flag.flags, *flag.negative})


def extensions(declared: Iterable[tuple[tuple[str, ...], tuple[str, ...], str | None]]
               ) -> list[tuple[str, str | None, str | None]]:
    """Of this server's options (their flags and environment variable), what llama-server lacks:
    (the option's name, it again when llama-server has no such flag, its variable when llama-server has
    none). Each is (its flags, its negative flags, its variable)."""
    upstream_names = {name for flag in upstream_flags() for name in (*flag.flags, *flag.negative)}
    upstream_env = {flag.env for flag in upstream_flags() if flag.env}
    found = []
    for flags, negatives, env in declared:
        name = max(flags, key=len)
        own_flag = None if upstream_names & {*flags, *negatives} else name
        own_env = env if env and env not in upstream_env else None
        if own_flag or own_env:
            found.append((name, own_flag, own_env))
    return found


def readme_section(unimplemented_flags: tuple[UpstreamFlag, ...],
                   own: list[tuple[str, str | None, str | None]] | None = None) -> str:
    """The README's list of the unimplemented flags, grouped by treatment and reason, and of this
    server's extensions (a test checks that the README holds exactly this)."""
    groups: dict[str, dict[str, list[str]]] = {"warn": {}, "refuse": {}}
    for flag in unimplemented_flags:
        how = treatment(flag)
        assert how is not None
        groups[how.action].setdefault(how.reason, []).append(" ".join(f"`{name}`" for name in
                                                                      (*flag.flags, *flag.negative)))
    total = len(upstream_flags())
    warned = sum(len(v) for v in groups["warn"].values())
    refused = sum(len(v) for v in groups["refuse"].values())
    lines = [f"Of llama-server's {total} flag entries (its `common/arg.cpp` at the pinned llama.cpp, listed in "
             f"`app/config/upstream_flags.json`): {total - warned - refused} are implemented (the table above), "
             f"{warned} are accepted with a start-up warning, {refused} are refused. The same holds for their "
             "environment variables."]
    for action, title in (("warn", "Accepted, with a warning that they have no effect here"),
                          ("refuse", "Refused at start-up (exit 2), with the reason")):
        lines += ["", f"**{title}:**", "", "| flags | why |", "|---|---|"]
        lines += [f"| {', '.join(names)} | {reason} |" for reason, names in sorted(groups[action].items())]
    if own:
        lines += ["", "**This server's own, which llama-server does not have** (flags and environment variables):",
                  "", "| option | own flag | own environment variable |", "|---|---|---|"]
        lines += [f"| `{name}` | {f'`{flag}`' if flag else ''} | {f'`{env}`' if env else ''} |"
                  for name, flag, env in own]
    return "\n".join(lines) + "\n"
