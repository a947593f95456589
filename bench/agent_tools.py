"""What agent mode's tool calls cost, in process (no HTTP, no model):

    .venv/bin/python bench/agent_tools.py [--calls 200]

- an MCP server (tests/mcp_standin.py, written with the official SDK): the start-up discovery (spawn, list
  its tools, stop), the first call (which starts it again) and the median of ``--calls`` calls on its session;
- built-in tools on this host: ``read_file`` of a small file and ``exec_shell_command`` of ``true`` (a process
  group spawned and reaped each time).

Not a test: timings on shared machines are noisy.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.agent.mcp_config import McpServerConfig  # noqa: E402
from app.agent.options import AgentOptions  # noqa: E402
from app.agent.tool import Limits  # noqa: E402
from app.agent.toolbox import Toolbox  # noqa: E402


def timed(call: Callable[[], object], runs: int) -> str:
    took = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        took.append((time.perf_counter() - started) * 1000)
    return f"median {statistics.median(took):.2f} ms, p90 {sorted(took)[int(runs * 0.9)]:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    runs = parser.parse_args().calls
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "notes.md").write_text("alpha\nbeta\n")
        standin = McpServerConfig("st", sys.executable, (str(ROOT / "tests" / "mcp_standin.py"),))
        started = time.perf_counter()
        box = Toolbox(AgentOptions(("read_file", "exec_shell_command"), mcp_servers=(standin,),
                                   limits=Limits(root)))
        print(f"start-up with one MCP server (spawn, list its tools, stop): {time.perf_counter() - started:.2f} s")
        add = box.find("st_add", False)
        started = time.perf_counter()
        box.call(add, {"a": 1, "b": 2})
        print(f"MCP first call (the server started again): {(time.perf_counter() - started) * 1000:.0f} ms")
        print(f"MCP call on its session: {timed(lambda: box.call(add, {'a': 1, 'b': 2}), runs)}")
        read = box.find("read_file", False)
        print(f"read_file: {timed(lambda: box.call(read, {'path': 'notes.md'}), runs)}")
        shell = box.find("exec_shell_command", False)
        print(f"exec_shell_command true: {timed(lambda: box.call(shell, {'command': 'true'}), runs)}")
        box.close()


if __name__ == "__main__":
    main()
