"""The CPUs this process may use: the ones it may run on (its affinity mask, which a container's
cpuset sets), held to its CPU quota (cgroup v2 ``cpu.max``, or v1's ``cpu.cfs_quota_us``). A
container on Vertex AI or Kubernetes sees the host's cores in ``os.cpu_count()``; starting that many
llama.cpp threads on a 4-CPU quota makes them wait for each other at every barrier."""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_quota(cgroup: Path = CGROUP) -> float | None:
    """CPUs' worth of time the cgroup may use (``2.5`` for 250000/100000); None without a quota."""
    v2 = _read(cgroup / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
            return int(quota) / int(period)
        return None
    quota_v1, period_v1 = _read(cgroup / "cpu" / "cpu.cfs_quota_us"), _read(cgroup / "cpu" / "cpu.cfs_period_us")
    if quota_v1 and period_v1 and quota_v1.isdigit() and period_v1.isdigit() and int(period_v1) > 0:
        return int(quota_v1) / int(period_v1)  # v1's "no quota" is -1, which is not digits
    return None


def usable_cpus(cgroup: Path = CGROUP) -> int:
    """How many CPUs this process may keep busy: its affinity, held to its quota (rounded up)."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = os.cpu_count() or 1
    quota = cpu_quota(cgroup)
    return max(1, min(allowed, math.ceil(quota)) if quota is not None else allowed)
