"""Why the worker died, and whether the server goes on: what the gunicorn master decides when its
one worker exits without being asked to.

The worker writes what it is doing into a value shared with the master (booting, serving, exiting)
and, if it dies of a fatal signal, Python's faulthandler writes a crash report (the signal and every
thread's stack) into a file the master reads. From those two:

- a worker that dies before its model has loaded stops the server at once, with the cause: it
  would die the same way again, and a restart loop would serve nothing while looking alive;
- a worker that dies after it has served is restarted, up to ``RESTART_LIMIT`` times within
  ``RESTART_WINDOW_SECONDS``; the next crash stops the server (Vertex AI then restarts the
  container, and its logs show why).

A server that stops exits with 128 + the signal number, as a shell reports a process killed by
that signal (1 when no crash report says which).
"""

from __future__ import annotations

import multiprocessing
import re
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from app.host.llama_build import Cpu, illegal_instruction_advice

RESTART_LIMIT = 3
RESTART_WINDOW_SECONDS = 600.0

# faulthandler's first line names the signal ("Fatal Python error: Illegal instruction").
FAULTHANDLER_NAMES = {
    "Illegal instruction": signal.SIGILL,
    "Segmentation fault": signal.SIGSEGV,
    "Floating point exception": signal.SIGFPE,
    "Aborted": signal.SIGABRT,
    "Bus error": signal.SIGBUS,
}
_FATAL_LINE = re.compile(r"Fatal Python error: ([^\n]+)")


class Phase(IntEnum):
    BOOTING = 0  # forked, loading the model
    SERVING = 1  # the model loaded: it has served, or could have
    EXITING = 2  # leaving through Python (a clean stop, or gunicorn's own exit paths)


class WorkerPhase:
    """The current worker's phase, in memory the master shares with it across ``fork``."""

    def __init__(self) -> None:
        self._value = multiprocessing.RawValue("i", Phase.BOOTING)

    def set(self, phase: Phase) -> None:
        self._value.value = int(phase)

    def get(self) -> Phase:
        return Phase(self._value.value)


@dataclass(frozen=True)
class CrashReport:
    signal: signal.Signals | None
    text: str

    @property
    def signal_name(self) -> str:
        return self.signal.name if self.signal is not None else "an unknown signal"


def read_crash_report(path: Path) -> CrashReport | None:
    """The faulthandler report in ``path``, or None if the worker wrote none."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return None
    if not text:
        return None
    match = _FATAL_LINE.search(text)
    return CrashReport(FAULTHANDLER_NAMES.get(match.group(1).strip()) if match else None, text)


@dataclass(frozen=True)
class Verdict:
    stop: bool  # True: stop the server with ``exit_status``; False: start another worker
    exit_status: int
    message: str  # the one log line that names the cause


class CrashPolicy:
    """Counts crashes after start; a clock is injectable for tests."""

    def __init__(self, limit: int = RESTART_LIMIT, window: float = RESTART_WINDOW_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._window = window
        self._clock = clock
        self._crashes: deque[float] = deque()

    def judge(self, pid: int, phase: Phase, report: CrashReport | None, cpu: Cpu,
              build_args: Sequence[str] | None) -> Verdict | None:
        """None for a worker that left cleanly; otherwise what to do, and the line to log."""
        if phase is Phase.EXITING:
            return None
        status = 128 + int(report.signal) if report is not None and report.signal is not None else 1
        cause = describe_death(report, cpu, build_args)
        if phase is Phase.BOOTING:
            return Verdict(True, status, f"the worker (pid {pid}) died while loading the model, {cause}; "
                                         "stopping instead of restarting it")
        now = self._clock()
        self._crashes.append(now)
        while self._crashes and self._crashes[0] < now - self._window:
            self._crashes.popleft()
        count = len(self._crashes)
        if count > self._limit:
            return Verdict(True, status, f"the worker (pid {pid}) died after serving, {cause}; that is {count} "
                                         f"crashes within {self._window:.0f} s, so the server stops")
        return Verdict(False, status, f"the worker (pid {pid}) died after serving, {cause}; starting a new one "
                                      f"(crash {count} of {self._limit} allowed within {self._window:.0f} s)")


def describe_death(report: CrashReport | None, cpu: Cpu, build_args: Sequence[str] | None) -> str:
    if report is None:
        return ("killed without a crash report (SIGKILL: out of memory, or gunicorn's worker timeout; "
                "or an abort inside llama.cpp, whose message is above)")
    if report.signal == signal.SIGILL:
        return f"killed by SIGILL (illegal instruction): {illegal_instruction_advice(cpu, build_args)}"
    return f"killed by {report.signal_name} ({_first_line(report.text)})"


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""
