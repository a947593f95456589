"""What the master decides when its worker dies (app/server/worker_crashes.py); the worker's health fast
path and the socket that holds a response's headers back until its body (app/server/gunicorn_server.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from app.host.llama_build import DYNAMIC_DISPATCH, parse_cpuinfo
from app.server.gunicorn_server import HeldHeaderSocket
from app.server.worker_crashes import CrashPolicy, CrashReport, Phase, WorkerPhase, read_crash_report

AVX2_ONLY = parse_cpuinfo("model name\t: AMD EPYC 7B12\nflags\t\t: sse sse2 sse4_2 avx avx2 fma f16c bmi2\n",
                          "Linux", "x86_64")
AVX512_BUILD = ("-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_AVX512=ON")
SIGILL_REPORT = CrashReport(signal.SIGILL, "Fatal Python error: Illegal instruction\n\nThread 0x1 (most recent ...")


def test_a_real_faulthandler_report_is_read_back_with_its_signal(tmp_path: Path) -> None:
    report_path = tmp_path / "worker.txt"
    code = (f"import faulthandler, os, signal; f = open({str(report_path)!r}, 'w'); "
            "faulthandler.enable(f, all_threads=True); os.kill(os.getpid(), signal.SIGILL)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert result.returncode == -signal.SIGILL
    report = read_crash_report(report_path)
    assert report is not None and report.signal == signal.SIGILL
    assert "most recent call first" in report.text
    assert read_crash_report(tmp_path / "absent.txt") is None


def test_a_crash_while_loading_stops_the_server_and_says_why() -> None:
    verdict = CrashPolicy().judge(42, Phase.BOOTING, SIGILL_REPORT, AVX2_ONLY, AVX512_BUILD)
    assert verdict is not None and verdict.stop
    assert verdict.exit_status == 128 + signal.SIGILL
    for part in ("pid 42", "while loading", "SIGILL", "AMD EPYC 7B12", "avx2", "avx512f", "dev.sh install"):
        assert part in verdict.message, part


def test_sigill_under_runtime_dispatch_is_reported_as_a_dispatch_problem() -> None:
    verdict = CrashPolicy().judge(7, Phase.BOOTING, SIGILL_REPORT, AVX2_ONLY, DYNAMIC_DISPATCH)
    assert verdict is not None and "runtime CPU dispatch" in verdict.message
    assert "LLAMA_CPU_TARGET=host" in verdict.message


def test_a_death_without_a_report_still_stops_a_booting_server() -> None:
    verdict = CrashPolicy().judge(7, Phase.BOOTING, None, AVX2_ONLY, None)
    assert verdict is not None and verdict.stop and verdict.exit_status == 1
    assert "without a crash report" in verdict.message


def test_a_clean_exit_is_no_crash() -> None:
    assert CrashPolicy().judge(7, Phase.EXITING, None, AVX2_ONLY, None) is None


def test_crashes_after_serving_restart_a_few_times_within_the_window_then_stop() -> None:
    now = [0.0]
    policy = CrashPolicy(limit=3, window=600, clock=lambda: now[0])
    report = CrashReport(signal.SIGSEGV, "Fatal Python error: Segmentation fault")
    verdicts = []
    for _ in range(4):
        now[0] += 60
        verdict = policy.judge(1, Phase.SERVING, report, AVX2_ONLY, None)
        assert verdict is not None
        verdicts.append(verdict)
    assert [v.stop for v in verdicts] == [False, False, False, True]
    assert "crash 1 of 3" in verdicts[0].message and "SIGSEGV" in verdicts[0].message
    assert verdicts[3].exit_status == 128 + signal.SIGSEGV
    now[0] += 10_000  # an hour later the old crashes no longer count
    later = policy.judge(1, Phase.SERVING, report, AVX2_ONLY, None)
    assert later is not None and not later.stop


def test_the_phase_is_shared_with_a_forked_child() -> None:
    phase = WorkerPhase()
    pid = os.fork()
    if pid == 0:
        phase.set(Phase.SERVING)
        os._exit(0)
    os.waitpid(pid, 0)
    assert phase.get() is Phase.SERVING


class RecordingSocket:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.sent.append(bytes(data))

    def fileno(self) -> int:
        return 3


def test_the_header_block_goes_out_with_the_first_body_bytes() -> None:
    raw = RecordingSocket()
    held = HeldHeaderSocket(raw)
    held.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
    assert raw.sent == []  # a worker that died here would have sent nothing
    held.sendall(b"{}")
    held.sendall(b"more")
    held.flush()
    assert raw.sent == [b"HTTP/1.1 200 OK\r\n\r\n{}", b"more"]
    assert held.fileno() == 3


def test_a_response_with_an_empty_body_is_flushed_at_the_end() -> None:
    raw = RecordingSocket()
    held = HeldHeaderSocket(raw)
    held.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
    held.flush()
    held.flush()
    assert raw.sent == [b"HTTP/1.1 204 No Content\r\n\r\n"]


def test_the_request_target_is_read_without_consuming_the_request() -> None:
    import socket

    from app.server.gunicorn_server import request_target

    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b"GET /health?probe=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert request_target(ours) == b"/health"
        assert ours.recv(100).startswith(b"GET /health?probe=1 HTTP/1.1")  # still there for the parser
        theirs.sendall(b"POST /health HTTP/1.1\r\n")
        assert request_target(ours) is None  # only GET and HEAD
        ours.recv(100)
        theirs.sendall(b"GET /hea")
        assert request_target(ours) is None  # a request line not yet whole goes the usual way
