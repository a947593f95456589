"""Where llama.cpp's compute threads run and how they wait: llama-server's --cpu-mask, --cpu-range,
--cpu-strict, --prio and --poll.

The portable build runs ggml's threads as an OpenMP team (libgomp), which ignores the settings of
ggml's own thread pool, so the flags are applied the way that team takes them:

- the CPU set (``--cpu-mask`` and ``--cpu-range`` together): the engine thread's affinity, set before
  it decodes anything; the team's threads inherit it when the engine thread creates them. The HTTP
  threads keep the process's CPUs.
- ``--cpu-strict 1``: libgomp binds each thread to one CPU of the set (``OMP_PROC_BIND``, ``OMP_PLACES``).
- ``--poll``: how long a thread that waits at a barrier spins before it sleeps (``GOMP_SPINCOUNT``,
  50 being libgomp's own default; 0: ``OMP_WAIT_POLICY=passive``, it sleeps at once, which is what a
  core shared with other busy processes wants: bench/cpu_contention.py).
- ``--prio``: the process's nice value, with llama.cpp's mapping, inherited by every thread.

The same settings also reach llama.cpp's thread pools (app/engine/llama/threadpool.py), which ggml
applies at every graph, and which give prompt processing and the draft model placements of their own.

libgomp reads its environment when it loads, with the first import of llama_cpp: ``prepare_process``
runs in the master process before that (app/server/cli.py), and the worker inherits it. Variables the user
set already are left alone.
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Mapping, MutableMapping
from pathlib import Path

log = logging.getLogger(__name__)

MAX_CPUS = 512  # ggml's GGML_MAX_N_THREADS: the most CPUs a mask names
NICE = {-1: 5, 0: 0, 1: -5, 2: -10, 3: -20}  # --prio low, normal, medium, high, realtime (llama.cpp's)
DEFAULT_POLL = 50
SPIN_PER_POLL = 6000  # --poll 50: libgomp's default spin count, 300,000


class PlacementError(ValueError):
    """A CPU mask or range that cannot be read; the message says why."""


def parse_cpu_mask(text: str, flag: str = "--cpu-mask") -> frozenset[int]:
    """llama.cpp's --cpu-mask: hexadecimal, bit i for CPU i (``0x`` allowed)."""
    digits = text.strip().lower().removeprefix("0x")
    try:
        value = int(digits, 16)
    except ValueError:
        raise PlacementError(f"{flag}: {text!r} is not a hexadecimal mask, e.g. 0x3 for CPUs 0 and 1") from None
    cpus = frozenset(bit for bit in range(value.bit_length()) if value >> bit & 1)
    if not cpus or max(cpus) >= MAX_CPUS:
        raise PlacementError(f"{flag}: {text!r} names no CPU below {MAX_CPUS}")
    return cpus


def parse_cpu_range(text: str, flag: str = "--cpu-range") -> frozenset[int]:
    """llama.cpp's --cpu-range: ``lo-hi``, either end optional (0, or the last CPU ggml knows)."""
    start, dash, end = text.strip().partition("-")
    try:
        if not dash:
            raise ValueError
        first = int(start) if start else 0
        last = int(end) if end else MAX_CPUS - 1
    except ValueError:
        raise PlacementError(f"{flag}: {text!r} is not a range, e.g. 0-3") from None
    if not 0 <= first <= last < MAX_CPUS:
        raise PlacementError(f"{flag}: {text!r} is out of order or past CPU {MAX_CPUS - 1}")
    return frozenset(range(first, last + 1))


def compute_cpus(mask: str | None, cpu_range: str | None, available: frozenset[int],
                 flags: tuple[str, str] = ("--cpu-mask", "--cpu-range")) -> frozenset[int] | None:
    """The CPUs the compute threads may use: the mask's and the range's together (as llama.cpp
    complements one with the other), of those this process may use; None when neither is given."""
    if mask is None and cpu_range is None:
        return None
    wanted = parse_cpu_mask(mask, flags[0]) if mask else frozenset()
    wanted |= parse_cpu_range(cpu_range, flags[1]) if cpu_range else frozenset()
    cpus = wanted & available
    if not cpus:
        names = "/".join(filter(None, flags))
        raise PlacementError(f"{names}: none of CPUs {sorted(wanted)[:8]} is one this process may use "
                             f"({sorted(available)})")
    return cpus


def openmp_environment(cpus: frozenset[int] | None, strict: bool, poll: int) -> dict[str, str]:
    """The libgomp variables for these settings (empty for the defaults)."""
    environment: dict[str, str] = {}
    if poll == 0:
        environment["OMP_WAIT_POLICY"] = "passive"
    elif poll != DEFAULT_POLL:
        environment["GOMP_SPINCOUNT"] = str(poll * SPIN_PER_POLL)
    if strict and cpus:
        environment["OMP_PROC_BIND"] = "close"
        environment["OMP_PLACES"] = ",".join(f"{{{cpu}}}" for cpu in sorted(cpus))
    return environment


def prepare_process(cpus: frozenset[int] | None, strict: bool, poll: int, prio: int,
                    environ: MutableMapping[str, str] = os.environ) -> None:
    """Before llama_cpp is imported: libgomp's environment and the process's priority."""
    for name, value in openmp_environment(cpus, strict, poll).items():
        environ.setdefault(name, value)
    nice = NICE[prio]
    if nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        except OSError as exc:  # a higher priority needs CAP_SYS_NICE: go on at the normal one, as llama.cpp
            log.warning("--prio %s: could not set the nice value %s (%s); running at the normal priority",
                        prio, nice, exc.strerror)


def place_compute_threads(cpus: frozenset[int] | None) -> None:
    """On the engine thread, before its first decode: its CPU set, which its OpenMP team inherits."""
    if cpus:
        os.sched_setaffinity(0, cpus)
        log.info("llama.cpp's threads run on CPUs %s", ",".join(map(str, sorted(cpus))))


REALTIME = {1: 40, 2: 80, 3: 90}  # ggml's thread priorities medium, high, realtime: SCHED_FIFO at these
CAP_SYS_NICE = 23


def thread_priority_allowed(prio: int, status: str | None = None) -> bool:
    """Whether this process may give llama.cpp's threads priority ``prio`` (ggml's: above normal is a
    real-time SCHED_FIFO priority, which needs CAP_SYS_NICE or an RLIMIT_RTPRIO as high). Where it may
    not, ggml would warn at every graph it computes: the pool is then left at the normal priority."""
    if prio not in REALTIME:
        return True
    soft, _ = resource.getrlimit(resource.RLIMIT_RTPRIO)
    if soft == resource.RLIM_INFINITY or soft >= REALTIME[prio]:
        return True
    if status is None:
        try:
            status = Path("/proc/self/status").read_text()
        except OSError:
            return False
    effective = next((line.split(":", 1)[1] for line in status.splitlines() if line.startswith("CapEff:")), "0")
    return bool(int(effective.strip() or "0", 16) >> CAP_SYS_NICE & 1)


def describe(environ: Mapping[str, str]) -> str:
    """The libgomp variables in effect, for the log."""
    return " ".join(f"{name}={environ[name]}" for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND",
                                                            "OMP_PLACES") if name in environ)
