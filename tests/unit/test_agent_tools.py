"""Agent mode's built-in tools on this host: their answers as llama-server's, and the bounds this server
keeps (the tools root, a command's time and output, names that would become options)."""

from __future__ import annotations

import base64
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from app.agent.options import AgentOptions
from app.agent.processes import run_process
from app.agent.search import glob_match, path_glob_match
from app.agent.tool import InvalidParams, Limits
from app.agent.tool_io import ContainerIO, OutsideRoot, SshIO, ToolError, make_io
from app.agent.toolbox import Toolbox


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "main.py").write_text("import os\nprint('hello')\n# TODO: more\n")
    (root / "src" / "deep" / "util.py").write_text("def helper():\n    return 42  # TODO\n")
    (root / "notes.md").write_text("line one\nline two\nline three\n")
    (root / "node_modules" / "pkg").mkdir(parents=True)
    (root / "node_modules" / "pkg" / "index.js").write_text("// TODO vendored\n")
    return root


def toolbox(root: Path, **limits: Any) -> Toolbox:
    return Toolbox(AgentOptions(("all",), limits=Limits(str(root), **limits)))


def call(box: Toolbox, name: str, cwd: str = "", **params: Any) -> dict[str, Any]:
    return box.call(box.find(name, False), params, cwd)


def test_read_file_lines_numbers_and_base64(workspace: Path) -> None:
    box = toolbox(workspace)
    assert call(box, "read_file", path="notes.md") == {"plain_text_response": "line one\nline two\nline three\n"}
    numbered = call(box, "read_file", path="notes.md", start_line=2, end_line=3, append_loc=True)
    assert numbered == {"plain_text_response": "2\u2192line two\n3\u2192line three\n"}
    raw = box.call(box.find("read_file", False), {"path": "notes.md"}, resp_type="base64")
    assert base64.b64decode(raw["base64"]) == (workspace / "notes.md").read_bytes() and raw["size_bytes"] == 29
    assert call(box, "read_file", path="missing.txt") == {"error": "cannot stat file: missing.txt"}


def test_read_file_refuses_a_large_file_unless_a_range_is_given(workspace: Path) -> None:
    (workspace / "big.txt").write_text("x" * 100 + "\n" + "y" * 400 + "\n")
    box = toolbox(workspace, max_output=256)
    assert "file too large" in call(box, "read_file", path="big.txt")["error"]
    assert call(box, "read_file", path="big.txt", end_line=1) == {"plain_text_response": "x" * 100 + "\n"}
    assert call(box, "read_file", path="big.txt", end_line=2)["plain_text_response"].endswith("[output truncated]")


def test_paths_outside_the_root_are_refused_links_included(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("keys")
    (workspace / "link").symlink_to(secret)
    box = toolbox(workspace)
    for path in ("../secret.txt", str(secret), "link", "src/../../secret.txt"):
        answer = call(box, "read_file", path=path)
        assert answer["error"].startswith("path is outside the tools root"), path
    assert call(box, "write_file", path="../escaped.txt", content="x")["error"].startswith("path is outside")
    assert not (tmp_path / "escaped.txt").exists()
    assert call(box, "grep_search", path="..", pattern="keys")["error"].startswith("path is outside")
    with pytest.raises(OutsideRoot):  # a working directory (x-tool-cwd) outside: the request is refused
        call(box, "get_info", cwd=str(tmp_path))
    inside = call(box, "read_file", cwd=str(workspace / "src"), path="main.py")
    assert inside["plain_text_response"].startswith("import")
    relative = call(box, "read_file", cwd="src/deep", path="util.py")  # a relative x-tool-cwd: from the root
    assert relative["plain_text_response"].startswith("def helper")
    with pytest.raises(OutsideRoot):
        call(box, "get_info", cwd="../..")


def test_the_root_slash_reaches_anywhere_as_llama_server(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("out\n")
    box = toolbox(Path("/"))
    assert call(box, "read_file", path=str(tmp_path / "outside.txt")) == {"plain_text_response": "out\n"}


def test_write_and_edit_file(workspace: Path) -> None:
    box = toolbox(workspace)
    written = call(box, "write_file", path="new/dir/file.txt", content="alpha\nbeta\n")
    assert written == {"result": "file written successfully", "path": "new/dir/file.txt", "bytes": 11}
    edited = call(box, "edit_file", path="new/dir/file.txt", edits=[{"old_text": "beta", "new_text": "gamma"}])
    assert edited["edits_applied"] == 1 and (workspace / "new/dir/file.txt").read_text() == "alpha\ngamma\n"
    assert "could not find" in call(box, "edit_file", path="new/dir/file.txt",
                                    edits=[{"old_text": "delta", "new_text": "x"}])["error"]
    (workspace / "twice.txt").write_text("same\nsame\n")
    assert "2 occurrences" in call(box, "edit_file", path="twice.txt", edits=[{"old_text": "same", "new_text": "x"}])[
        "error"]
    assert "overlap" in call(box, "edit_file", path="new/dir/file.txt", edits=[
        {"old_text": "alpha\ng", "new_text": "A"}, {"old_text": "gamma", "new_text": "G"}])["error"]
    assert "identical" in call(box, "edit_file", path="new/dir/file.txt",
                               edits=[{"old_text": "alpha", "new_text": "alpha"}])["error"]
    with pytest.raises(InvalidParams):
        call(box, "edit_file", path="new/dir/file.txt", edits=[{"old_text": 1}])


def test_edit_file_matches_typographic_text_and_keeps_the_other_lines(workspace: Path) -> None:
    original = "keep \u201cthis\u201d  \nsay \u2018hi\u2019 \u2013 now\t\nlast line\n"
    (workspace / "typo.txt").write_text(original)
    box = toolbox(workspace)
    answer = call(box, "edit_file", path="typo.txt", edits=[{"old_text": "say 'hi' - now", "new_text": "said"}])
    assert answer["result"] == "file edited successfully"
    assert (workspace / "typo.txt").read_text() == "keep \u201cthis\u201d  \nsaid\nlast line\n"


def test_file_glob_search(workspace: Path) -> None:
    box = toolbox(workspace)
    found = call(box, "file_glob_search", path=".", include="*.py")
    assert sorted(entry["path"] for entry in found["entries"]) == ["src/deep/util.py", "src/main.py"]
    assert found["base"] == str(workspace) and "Total matches: 2" in found["plain_text_response"]
    dirs = call(box, "file_glob_search", path=".", type="dir")
    assert {"path": "node_modules", "type": "dir"} in dirs["entries"]  # listed, never walked into
    assert all(not entry["path"].startswith("node_modules/") for entry in dirs["entries"])
    shallow = call(box, "file_glob_search", path=".", max_depth=1)
    assert [entry["path"] for entry in shallow["entries"]] == ["notes.md"]
    limited = call(box, "file_glob_search", path=".", include="**", limit=1)
    assert len(limited["entries"]) == 1 and "results limit reached" in limited["plain_text_response"]
    assert call(box, "file_glob_search", path=".", type="bad")["error"].startswith("invalid type")
    assert call(box, "file_glob_search", path=".", limit=0)["error"].startswith("invalid limit")


def test_file_glob_search_follows_gitignore_in_a_repository(workspace: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / ".gitignore").write_text("notes.md\n")
    found = call(toolbox(workspace), "file_glob_search", path=".")
    assert "notes.md" not in [entry["path"] for entry in found["entries"]]
    assert "src/main.py" in [entry["path"] for entry in found["entries"]]


def test_grep_search(workspace: Path) -> None:
    box = toolbox(workspace)
    text = call(box, "grep_search", path=".", pattern="TODO", return_line_numbers=True)["plain_text_response"]
    assert "src/main.py:3:# TODO: more" in text and "src/deep/util.py:2:" in text
    assert "node_modules" not in text and "Total matches: 2" in text
    literal = call(box, "grep_search", path="src/main.py", pattern="print('hello')", literal=True)
    assert "src/main.py:print('hello')" in literal["plain_text_response"]
    context = call(box, "grep_search", path="notes.md", pattern="two", context_lines=1)["plain_text_response"]
    assert context.startswith("notes.md-1-line one\nnotes.md:2:line two\nnotes.md-3-line three\n--\n")
    assert call(box, "grep_search", path=".", pattern="tOdO", ignore_case=True, include="*.md")[
        "plain_text_response"].endswith("Total matches: 0\n")
    assert call(box, "grep_search", path=".", pattern="(")["error"].startswith("invalid regex")


@pytest.mark.parametrize(("pattern", "path", "matches"), [
    ("*.py", "main.py", True), ("*.py", "a/main.py", False), ("src/*.py", "src/main.py", True),
    ("src/**/*.py", "src/deep/util.py", True), ("**", "a/b/c", True), ("[ab]?.txt", "b1.txt", True),
    ("[!ab]?.txt", "b1.txt", False),
])
def test_glob_rules(pattern: str, path: str, matches: bool) -> None:
    assert glob_match(pattern, path) is matches


def test_a_pattern_without_a_slash_matches_the_base_name_at_any_depth() -> None:
    assert path_glob_match("*.py", "src/deep/util.py") and path_glob_match("deep/*.py", "src/deep/util.py")
    assert not path_glob_match("/deep/*.py", "src/deep/util.py")


def test_exec_shell_command_answers_its_output_and_exit_code(workspace: Path) -> None:
    box = toolbox(workspace)
    answer = call(box, "exec_shell_command", command="echo out; echo err >&2; exit 3")
    assert answer == {"plain_text_response": "out\nerr\n\n[exit code: 3]"}
    assert call(box, "exec_shell_command", cwd=str(workspace / "src"), command="pwd")["plain_text_response"] == \
        f"{workspace / 'src'}\n\n[exit code: 0]"


def test_a_command_that_never_ends_is_killed_with_what_it_started(workspace: Path, tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    box = toolbox(workspace, max_timeout=1)
    started = time.monotonic()
    answer = call(box, "exec_shell_command", command=f"sleep 300 & echo $! > {marker}; wait", timeout=50)
    assert time.monotonic() - started < 30  # capped to --tools-max-timeout (1 s), not the 50 asked
    assert answer["plain_text_response"].endswith("[exit due to timed out]")
    child = int(marker.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)  # the background child went with the shell


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_output_past_the_cap_is_cut_and_the_command_still_ends(workspace: Path) -> None:
    box = toolbox(workspace, max_output=1000)
    answer = call(box, "exec_shell_command", command="head -c 200000 /dev/zero | tr '\\0' x; echo done >&2",
                  max_output_size=10**9)
    text = answer["plain_text_response"]
    assert text.startswith("x" * 1000 + "\n[output truncated]") and text.endswith("[exit code: 0]")


def test_a_streamed_command_sends_its_output_as_it_comes(workspace: Path) -> None:
    box = toolbox(workspace)
    pieces: list[tuple[float, str]] = []
    tool = box.find("exec_shell_command", True)
    box.call(tool, {"command": "echo one; sleep 0.5; echo two"},
             on_chunk=lambda text: not pieces.append((time.monotonic(), text)))  # type: ignore[func-returns-value]
    text = "".join(piece for _, piece in pieces)
    assert text == "one\ntwo\n\n[exit code: 0]"
    assert pieces[0][1] == "one\n" and pieces[-1][0] - pieces[0][0] > 0.3  # the first came before the sleep


def test_a_stream_whose_client_left_stops_the_command(workspace: Path) -> None:
    started = time.monotonic()
    result = run_process(["sh", "-c", "while true; do echo tick; sleep 0.1; done"], 10000, 60,
                         on_chunk=lambda text: False)
    assert time.monotonic() - started < 10 and result.exit_code != 0


def test_get_info(workspace: Path) -> None:
    answer = call(toolbox(workspace), "get_info", cwd=str(workspace))
    assert answer["cwd"] == str(workspace) and answer["os"].startswith("Linux")


def test_only_the_enabled_tools_are_listed_as_llama_server_lists_them(workspace: Path) -> None:
    box = Toolbox(AgentOptions(("read_file", "write_file"), limits=Limits(str(workspace))))
    listing = box.listing()
    assert [entry["tool"] for entry in listing] == ["read_file", "write_file"]
    assert listing[1] == {"display_name": "Write file", "tool": "write_file", "type": "server",
                          "permissions": {"write": True}, "uses_cwd": True, "definition": listing[1]["definition"]}
    assert listing[1]["definition"]["function"]["parameters"]["required"] == ["path", "content"]
    with pytest.raises(LookupError, match='does not support stream = true'):
        box.find("read_file", True)
    with pytest.raises(LookupError, match='unknown tool "get_info"'):
        box.find("get_info", False)
    with pytest.raises(ValueError, match=r'unknown tool "grep"\. available tools: read_file'):
        Toolbox(AgentOptions(("grep",)))


@pytest.mark.parametrize("runtime", ["ssh:-oProxyCommand=touch /tmp/x", "ssh:", "ssh:a b",
                                     "docker-container:--privileged", "podman-container:", "docker:image", "lxc:thing"])
def test_a_runtime_that_could_become_an_option_or_is_unknown_is_refused(runtime: str, workspace: Path) -> None:
    with pytest.raises(ToolError):
        make_io(runtime, "", str(workspace))


def test_isolates_are_driven_by_their_command_line() -> None:
    container = make_io("podman-container:abc123", "/work", "/")
    assert isinstance(container, ContainerIO)
    assert container.command(["cat", "f"], True) == ["podman", "exec", "-i", "abc123", "cat", "f"]
    ssh = make_io("ssh:user@box.example", "", "/", ("ssh", "-F", "cfg"))
    assert isinstance(ssh, SshIO)
    argv = ssh.command(["sh", "-c", "echo 'it''s'"], False)
    assert argv[:3] == ["ssh", "-F", "cfg"] and "BatchMode=yes" in argv and "StrictHostKeyChecking=yes" in argv
    assert argv[-3:] == ["-n", "user@box.example", "sh -c 'echo '\"'\"'it'\"'\"''\"'\"'s'\"'\"''"]


def test_the_server_environment_is_never_given_to_a_host_path_outside(tmp_path: Path) -> None:
    os.symlink("/etc", tmp_path / "etc-link")
    box = toolbox(tmp_path)
    assert call(box, "file_glob_search", path="etc-link")["error"].startswith("path is outside")
