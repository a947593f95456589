"""Every ``python -m gcp`` command in the code blocks of the README and docs/ parses with the tool's own
parser, so the walkthrough and the examples cannot drift from the flags."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from gcp.parser import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
VARIABLES = {"$P": "--project my-project --region us-central1", "$PROJECT": "my-project",
             "$REGION": "us-central1", "$IMAGE": "us-docker.pkg.dev/p/r/vertex-llama:1"}
COMMAND = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?python -m gcp (.*)$")


def documented_commands() -> list[str]:
    commands: list[str] = []
    in_block = False
    pending = ""
    for line in "\n".join(page.read_text() for page in PAGES).splitlines():
        if line.startswith("```"):
            in_block = not in_block
            continue
        if not in_block:
            continue
        if pending:
            pending += " " + line.strip()
        elif match := COMMAND.match(line.rstrip()):  # a command starts its line (prose mentions are indented)
            pending = match.group(1)
        else:
            continue
        text = pending.removesuffix("\\").rstrip()
        if pending.endswith("\\"):
            pending = text
            continue
        try:
            shlex.split(text)
        except ValueError:  # an open quote: the JSON goes on on the next line
            continue
        commands.append(text)
        pending = ""
    return commands


def test_every_gcp_command_in_the_docs_parses() -> None:
    commands = documented_commands()
    assert len(commands) >= 15
    names = set()
    for command in commands:
        for name, value in sorted(VARIABLES.items(), key=lambda item: -len(item[0])):  # $PROJECT before $P
            command = command.replace(name, value)
        args = build_parser().parse_args(shlex.split(command))
        names.add(args.command)
    assert {"doctor", "upload", "deploy", "status", "predict", "raw-predict", "batch-predict",
            "undeploy"} <= names
