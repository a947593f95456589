"""The web UI's agent loop in a real browser, against real servers with the embedded model: the model's
forced tool call runs through /tools, the user sees the call and its result, the result goes back to the
model, and the user can stop a tool call that takes long."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import Dialog, Page, expect

from tests.integration.conftest import Server, start
from tests.integration.test_web_ui import Console, browser, console, open_ui, page, playwright, send_chat

__all__ = ["browser", "console", "page", "playwright"]  # the browser fixtures, shared with test_web_ui.py

STANDIN = str(Path(__file__).resolve().parents[1] / "mcp_standin.py")
# read-only tools with short arguments: the model picks one, and the 135M model rambles in a long one
SAFE_TOOLS = "read_file,file_glob_search,get_info"


@pytest.fixture(scope="module")
def tools_server(server_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workspace = tmp_path_factory.mktemp("ui-workspace")
    (workspace / "notes.md").write_text("The meeting is on Tuesday.\n")
    server = start(server_dir, ["--tools", SAFE_TOOLS, "--tools-root", str(workspace), "-c", "4096", "-np", "1"])
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture(scope="module")
def waiting_server(server_dir: Path) -> Iterator[Server]:
    mcp = {"mcpServers": {"events": {"command": sys.executable, "args": [STANDIN, "--only-wait"]}}}
    server = start(server_dir, ["--mcp-servers-json", json.dumps(mcp), "-c", "2048", "-np", "1"])
    yield server
    assert server.stop() == 0, server.log()


def agent_settings(page: Page, tool_use: str, max_steps: int) -> None:
    page.locator("#chat-settings summary").click()
    expect(page.locator("#agent-settings")).to_be_visible()
    page.locator("select[name=tool_use]").select_option(tool_use)
    page.locator("input[name=max_steps]").fill(str(max_steps))
    page.locator("input[name=max_tokens]").fill("160")  # room for a tool call's JSON (a cut one is no call)
    page.locator("input[name=temperature]").fill("0")


def test_a_forced_tool_call_runs_on_the_server_and_its_result_goes_back(tools_server: Server, page: Page,
                                                                        console: Console) -> None:
    listing = {entry["tool"]: entry for entry in requests.get(tools_server.url("/tools"), timeout=10).json()}
    dialogs: list[str] = []

    def refuse(dialog: Dialog) -> None:  # a write tool asks first: the test says no
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    chats: list[dict[str, Any]] = []
    page.on("request", lambda request: chats.append(json.loads(request.post_data or "{}"))
            if request.url.endswith("/v1/chat/completions") else None)
    open_ui(page, tools_server)
    agent_settings(page, "required", 1)
    send_chat(page, "What does notes.md say?")
    tool = page.locator(".message.tool")
    expect(tool).to_have_count(1)
    expect(tool.locator(".tool-result")).not_to_have_text("running…")
    expect(page.locator(".message.assistant")).to_have_count(2)
    expect(page.locator(".message.assistant[aria-busy]")).to_have_count(0)
    expect(page.locator("#send")).to_be_enabled()
    name = (tool.locator(".role").text_content() or "").removeprefix("tool: ")
    arguments = tool.locator(".tool-arguments").text_content() or ""
    result = tool.locator(".tool-result").text_content() or ""
    assert name in listing
    assert page.locator(".message.assistant").first.locator(".tool-call strong").text_content() == f"Tool call: {name}"
    if listing[name]["permissions"]["write"]:
        assert dialogs and name in dialogs[0] and "did not allow" in result
    else:  # the same call made directly answers the same
        direct = requests.post(tools_server.url("/tools"), json={"tool": name, "params": json.loads(arguments)},
                               timeout=60).json()
        expected = direct.get("plain_text_response", json.dumps(direct, separators=(",", ":")))
        assert result.strip() == expected.strip()
    # the requests: the first with every tool, required; the second carries the call and its result, none
    assert len(chats) == 2
    assert chats[0]["tool_choice"] == "required" and len(chats[0]["tools"]) == len(listing)
    assert chats[1]["tool_choice"] == "none"
    call_message, tool_message = chats[1]["messages"][-2:]
    assert call_message["role"] == "assistant" and call_message["tool_calls"][0]["function"]["name"] == name
    assert tool_message == {"role": "tool", "tool_call_id": call_message["tool_calls"][0]["id"],
                            "content": result if result != "running…" else ""}
    assert console.errors == []


def test_the_user_stops_a_tool_call_that_takes_long(waiting_server: Server, page: Page, console: Console) -> None:
    open_ui(page, waiting_server)
    agent_settings(page, "required", 1)
    with page.expect_request(lambda request: request.url.endswith("/tools") and request.method == "POST"):
        send_chat(page, "Wait for the next event.")
    tool = page.locator(".message.tool")
    expect(tool.locator(".role")).to_have_text("tool: events_wait")
    expect(tool).to_have_attribute("aria-busy", "true")
    page.locator("#stop").click()
    expect(tool.locator(".tool-result")).to_contain_text("stopped by the user")
    expect(tool).not_to_have_attribute("aria-busy", "true")
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator(".message.assistant")).to_have_count(1)  # nothing more was asked of the model
    # the conversation is kept with the stopped call, and the server is free for the next message
    page.locator("select[name=tool_use]").select_option("off")
    with page.expect_request(lambda request: request.url.endswith("/v1/chat/completions")) as sent:
        send_chat(page, "Never mind.")
    body: dict[str, Any] = json.loads(sent.value.post_data or "{}")
    assert "tools" not in body and body["messages"][-2]["role"] == "tool"
    expect(page.locator(".message.assistant")).to_have_count(2)
    expect(page.locator(".message.assistant").last.locator(".stats")).to_contain_text("generated")
    errors = [error for error in console.errors if "/tools" not in error]  # the aborted fetch
    assert errors == []

