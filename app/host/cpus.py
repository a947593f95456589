"""The CPUs this process may use: the ones it may run on (its affinity mask, which a container's
cpuset sets), held to its CPU quota (cgroup v2 ``cpu.max``, or v1's ``cpu.cfs_quota_us``). A
container on Vertex AI or Kubernetes sees the host's cores in ``os.cpu_count()``; starting that many
llama.cpp threads on a 4-CPU quota makes them wait for each other at every barrier."""

from __future__ import annotations

import math
import os
from pathlib import Path

from app.host.cgroup import CGROUP, read_file


def cpu_quota(cgroup: Path = CGROUP) -> float | None:
    """CPUs' worth of time the cgroup may use (``2.5`` for 250000/100000); None without a quota."""
    v2 = read_file(cgroup / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
            return int(quota) / int(period)
        return None
    v1 = cgroup / "cpu"
    quota_v1, period_v1 = read_file(v1 / "cpu.cfs_quota_us"), read_file(v1 / "cpu.cfs_period_us")
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
