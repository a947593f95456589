"""Every chat template of the pinned llama.cpp (its ``models/templates/*.jinja``) rendered by llama-server and by
this server, side by side: ``/apply-template`` of llama-server (built by bench/llama_server.py) started with
``--jinja --chat-template-file`` for each, against this server's own route (in process, on the real embedded
model: its BOS and EOS tokens are the template's), for a plain chat with a system message, one user message,
a request with a tool, a history with an answer's reasoning, a history with a tool call and its result, a
developer message, a prefilled answer and a history with two calls. Prints one line a template (``.`` the same
prompt, ``X`` another; the format this server reads the template's tool calls in), the first lines that differ
with ``-v``, and how many templates render each case as llama-server.

    .venv/bin/python bench/templates.py [-v] [NAME ...]
"""

from __future__ import annotations

import difflib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config.settings import parse_settings
from app.handlers.tools import detect_format
from app.model_sources.files import embedded_model_path
from app.server.wiring import build_application
from bench.llama_server import build_folder, llama_server

CASES: dict[str, dict[str, Any]] = {
    "chat": {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Name a colour."}]},
    "user": {"messages": [{"role": "user", "content": "What is 2+2?"}]},
    "tools": {"messages": [{"role": "user", "content": "Weather in Paris?"}],
              "tools": [{"type": "function", "function": {
                  "name": "get_weather", "description": "Get the weather", "parameters": {
                      "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]},
    "thought": {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello.",
                                                                 "reasoning_content": "A greeting."},
                             {"role": "user", "content": "Name a colour."}]},
    "calls": {"messages": [{"role": "user", "content": "Weather in Paris?"},
                           {"role": "assistant", "content": None, "tool_calls": [{
                               "id": "call_1", "type": "function", "function": {
                                   "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                           {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]},
    "developer": {"messages": [{"role": "developer", "content": "Answer in French."},
                               {"role": "user", "content": "Hi"}]},
}
CASES["calls"]["tools"] = CASES["tools"]["tools"]
CASES["prefill"] = {"messages": [{"role": "user", "content": "Name a colour."},
                                 {"role": "assistant", "content": "My favourite colour is"}]}
CASES["two calls"] = {"tools": CASES["tools"]["tools"], "messages": [
    {"role": "user", "content": "Weather in Paris and Oslo?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call_{n}", "type": "function",
         "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'}}
        for n, city in enumerate(("Paris", "Oslo"))]},
    {"role": "tool", "tool_call_id": "call_0", "content": "18 C"},
    {"role": "tool", "tool_call_id": "call_1", "content": "4 C"},
    {"role": "assistant", "content": "Paris 18 C, Oslo 4 C."},
    {"role": "user", "content": "Thanks"}]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def theirs(binary: Path, template: Path, model: str) -> dict[str, str]:
    port = _free_port()
    process = subprocess.Popen([str(binary), "-m", model, "--jinja", "--chat-template-file", str(template), "--port",
                                str(port), "-t", "1", "-c", "512", "-np", "1"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        for _ in range(400):
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        return {case: _prompt(requests.post(f"http://127.0.0.1:{port}/apply-template", json=body, timeout=30))
                for case, body in CASES.items()}
    finally:
        process.kill()
        process.wait()


def ours(template: Path, model: str) -> tuple[dict[str, str], str]:
    """This server's prompts, and the format it reads the template's tool calls in."""
    settings = parse_settings(["--jinja", "--chat-template-file", str(template), "-np", "1", "-c", "512", "-t", "1",
                               "--no-warmup"], {})
    failures: list[BaseException] = []
    application = build_application(settings, model, None, failures.append)
    try:
        if not application.context.engine.wait_ready(120):
            return {case: f"no start: {failures[0] if failures else 'not ready'}" for case in CASES}, "-"
        client = application.flask.test_client()
        answers = {}
        for case, body in CASES.items():  # the body as the client sends it (Flask's own json= sorts the keys)
            reply = client.post("/apply-template", data=json.dumps(body), content_type="application/json")
            answers[case] = reply.json["prompt"] if reply.status_code == 200 and reply.json else (
                f"HTTP {reply.status_code}: {reply.get_data(as_text=True)[:200]}")
        learned = application.context.call_format
        tool_format = detect_format(application.context.chat_template.source, learned).value
        return answers, tool_format + (f" ({learned.arguments})" if learned and tool_format == "learned" else "")
    finally:
        application.shutdown()


def _prompt(reply: requests.Response) -> str:
    if reply.status_code == 200:
        return str(reply.json()["prompt"])
    return f"HTTP {reply.status_code}: {reply.text[:200]}"


def main(argv: list[str]) -> None:
    verbose = "-v" in argv
    wanted = [arg for arg in argv if arg != "-v"]
    binary = llama_server()
    folder = build_folder() / "llama.cpp" / "models" / "templates"
    model = str(embedded_model_path())
    same_all = 0
    same_by_case = dict.fromkeys(CASES, 0)
    formats: dict[str, int] = {}
    templates = sorted(path for path in folder.glob("*.jinja") if not wanted or any(w in path.name for w in wanted))
    for template in templates:
        (mine, tool_format), reference = ours(template, model), theirs(binary, template, model)
        marks = "".join("." if mine[case] == reference[case] else "X" for case in CASES)
        same_all += marks == "." * len(CASES)
        for case, mark in zip(CASES, marks, strict=True):
            same_by_case[case] += mark == "."
        formats[tool_format.split()[0]] = formats.get(tool_format.split()[0], 0) + 1
        print(f"{marks} {template.name:55} calls read as: {tool_format}", flush=True)
        for case in CASES if verbose else ():
            if mine[case] != reference[case]:
                diff = difflib.unified_diff(reference[case].splitlines(), mine[case].splitlines(), "llama-server",
                                            "vertex-llama", lineterm="", n=0)
                print("\n".join(f"    {case}: {line[:200]}" for line in list(diff)[:8]))
    print(f"{same_all} of {len(templates)} templates render every case as llama-server ({', '.join(CASES)}); "
          + ", ".join(f"{case} {same_by_case[case]}" for case in CASES))
    print("tool calls read as: " + ", ".join(f"{name} {count}" for name, count in sorted(formats.items())))


if __name__ == "__main__":
    main(sys.argv[1:])
