"""A worker that dies of a signal, in a real server: while loading the model it stops the server
with the cause in the log (no reboot loop); after serving it is restarted a few times, then the
server stops; and no answer is ever cut between its status line and its body. The crashes come
through the backend seam (app/server/fault_injection.py)."""

from __future__ import annotations

import http.client
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import requests

from app.host.llama_build import this_cpu
from app.server.fault_injection import CRASH_VARIABLE
from app.server.worker_crashes import RESTART_LIMIT
from tests.integration.conftest import Server, launch

EXIT_SECONDS = 60  # the restart loop this replaces never exited at all


def worker_pids(server: Server) -> list[int]:
    return [int(pid) for pid in re.findall(r"Booting worker with pid: (\d+)", server.log())]


def assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_sigill_while_loading_stops_the_server_with_the_cause(tmp_path: Path) -> None:
    server = launch(tmp_path, [], {CRASH_VARIABLE: "load:SIGILL"})
    code = server.process.wait(EXIT_SECONDS)
    log = server.log()
    assert code == 128 + signal.SIGILL, log
    assert len(worker_pids(server)) == 1, log  # never restarted
    assert_gone(worker_pids(server)[0])
    cause = next(line for line in log.splitlines() if "died while loading the model" in line)
    assert "SIGILL (illegal instruction)" in cause
    assert "scripts/dev.sh install" in cause and (this_cpu().model or "x86_64") in cause
    assert "Fatal Python error: Illegal instruction" in log  # the crash report, with the stacks
    assert "fault_injection.py" in log


def test_no_answer_is_cut_short_when_the_worker_dies_while_loading(tmp_path: Path) -> None:
    """Health checks answered 503 while the model loads; the worker dies meanwhile. Every answer
    is whole (a 503 with its JSON body) or a connection closed before any status line."""
    server = launch(tmp_path, [], {CRASH_VARIABLE: "load:SIGILL:2"})
    outcomes: list[str] = []
    lock = threading.Lock()

    def poll() -> None:
        while server.process.poll() is None:
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            try:
                connection.request("GET", "/health")
                response = connection.getresponse()
                body = response.read()
                whole = response.status == 503 and b"Loading model" in body
                outcome = "whole" if whole else f"unexpected: {response.status} {body!r}"
            except http.client.IncompleteRead as exc:
                outcome = f"cut: {exc!r}"
            except (ConnectionError, TimeoutError):  # RemoteDisconnected is one: closed before a status line
                outcome = "closed"
            finally:
                connection.close()
            with lock:
                outcomes.append(outcome)

    pollers = [threading.Thread(target=poll) for _ in range(6)]
    for poller in pollers:
        poller.start()
    code = server.process.wait(EXIT_SECONDS)
    for poller in pollers:
        poller.join(30)
    assert code == 128 + signal.SIGILL, server.log()
    assert outcomes.count("whole") > 0  # the pollers did see the loading period
    assert set(outcomes) <= {"whole", "closed"}, [o for o in outcomes if o not in ("whole", "closed")]


def test_a_crash_after_serving_restarts_the_worker_a_few_times_then_stops(tmp_path: Path) -> None:
    server = launch(tmp_path, ["-c", "1024"], {CRASH_VARIABLE: "decode:SIGSEGV"})
    try:
        for crash in range(1, RESTART_LIMIT + 2):
            server.wait_healthy()
            tokens = requests.post(server.url("/tokenize"), json={"content": "still serving"}, timeout=30)
            assert tokens.status_code == 200 and tokens.json()["tokens"]
            with pytest.raises(requests.ConnectionError):  # the worker dies at the first decode
                requests.post(server.url("/completion"), json={"prompt": "Hello", "n_predict": 4}, timeout=60)
            if crash <= RESTART_LIMIT:
                deadline = time.monotonic() + EXIT_SECONDS
                while len(worker_pids(server)) <= crash and time.monotonic() < deadline:
                    time.sleep(0.05)
        code = server.process.wait(EXIT_SECONDS)
    finally:
        server.stop()
    log = server.log()
    assert code == 128 + signal.SIGSEGV, log
    pids = worker_pids(server)
    assert len(pids) == RESTART_LIMIT + 1, log
    for pid in pids:
        assert_gone(pid)
    assert f"crash 1 of {RESTART_LIMIT} allowed" in log
    assert f"that is {RESTART_LIMIT + 1} crashes within" in log
    assert log.count("died after serving, killed by SIGSEGV") == RESTART_LIMIT + 1
