"""Write llama-server's flag table (app/config/upstream_flags.json) from common/arg.cpp of the llama.cpp that
the pinned llama-cpp-python vendors.

    python scripts/upstream_flags.py [path/to/llama.cpp/common/arg.cpp]

Without a path it downloads the pinned llama-cpp-python sdist from PyPI (pip download) and reads the
file from it. Each ``add_opt(common_arg(...))`` whose examples include the server (or all programs)
and that the server does not exclude becomes one entry: its flags, its negative flags, how many
values it takes (from the handler's parameters), its environment variable. Preset-only entries
are left out (they are not command-line flags).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "app" / "config" / "upstream_flags.json"
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def blocks(source: str) -> list[str]:
    """The text of every ``add_opt(common_arg(...)...);`` statement."""
    found = []
    for match in re.finditer(r"add_opt\(common_arg\(", source):
        depth, index, in_string = 0, match.start() + len("add_opt"), False
        while index < len(source):
            char = source[index]
            if in_string:
                if char == "\\":
                    index += 1
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    break
            index += 1
        found.append(source[match.start():index + 1])
    return found


def _braced_strings(text: str) -> tuple[list[str], str]:
    """The string literals of the ``{...}`` list that starts ``text`` and the text after it."""
    end = text.index("}")
    return STRING.findall(text[:end]), text[end + 1:]


def entry(block: str) -> dict[str, object] | None:
    block = re.sub(r"/\*.*?\*/", "", block)
    body = block[block.index("common_arg(") + len("common_arg("):]
    flags, rest = _braced_strings(body[body.index("{"):])
    rest = rest.lstrip(" ,\n")
    negative: list[str] = []
    if rest.startswith("{"):
        negative, rest = _braced_strings(rest)
    handler = re.search(r"\[\]\s*\(\s*common_params\s*&\s*\w*\s*(?:,([^)]*))?\)", block)
    parameters = [p for p in (handler.group(1) or "").split(",") if p.strip()] if handler else []
    kinds = ["bool" if "bool" in p else "int" if re.search(r"\bint\b", p) else "string" for p in parameters]
    values = 0 if kinds in ([], ["bool"]) else len(kinds)
    tail = block[block.rindex("common_arg("):]
    examples = re.search(r"\.set_examples\(\{([^}]*)\}", tail)
    excludes = re.search(r"\.set_excludes\(\{([^}]*)\}", tail)
    env = re.search(r'\.set_env\("([^"]+)"\)', tail)
    in_server = examples is None or "LLAMA_EXAMPLE_SERVER" in examples.group(1) or \
        "LLAMA_EXAMPLE_COMMON" in examples.group(1)
    if not in_server or (excludes and "LLAMA_EXAMPLE_SERVER" in excludes.group(1)) or ".set_preset_only()" in tail:
        return None
    removed = re.search(r'arg_removed\("([^"]*)"\)', block)
    return {"flags": flags, "negative": negative, "values": values, "kind": kinds[0] if kinds else "void",
            "env": env.group(1) if env else None, "sampling": ".set_sampling()" in tail,
            "speculative": ".set_spec()" in tail, "removed": removed.group(1) if removed else None}


def read_table(arg_cpp: str) -> list[dict[str, object]]:
    table: dict[tuple[str, ...], dict[str, object]] = {}
    for block in blocks(arg_cpp):
        item = entry(block)
        if item is not None:
            table.setdefault(tuple(item["flags"]), item)  # type: ignore[arg-type]
    return sorted(table.values(), key=lambda item: str(item["flags"][-1]).lstrip("-"))  # type: ignore[index]


def pinned_arg_cpp() -> str:
    version = subprocess.run([sys.executable, str(ROOT / "app" / "host" / "llama_build.py"), "version"], check=True,
                             capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={version}", "-d", scratch], check=True, capture_output=True)
        archive = next(Path(scratch).glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(archive) as sdist:
            member = next(m for m in sdist.getmembers() if m.name.endswith("vendor/llama.cpp/common/arg.cpp"))
            handle = sdist.extractfile(member)
            assert handle is not None
            return handle.read().decode()


def main() -> None:
    source = Path(sys.argv[1]).read_text() if len(sys.argv) > 1 else pinned_arg_cpp()
    table = read_table(source)
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{TABLE.relative_to(ROOT)}: {len(table)} flag entries (python scripts/docs.py writes the docs' list anew)")


if __name__ == "__main__":
    main()
