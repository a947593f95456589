"""The memory this process may still use: the cgroup's limit less its working set (a container), else
the kernel's MemAvailable. Read once at start-up (``--fit`` and the prompt cache's default size).

A cgroup's usage counts the page cache of every file its processes read or wrote: a model just
downloaded from Cloud Storage, or read once, can fill it up to the limit. The kernel reclaims the
inactive part of that cache before it fails an allocation, so, like the kubelet's and ``docker
stats``' working set, the room is the limit less the usage less the inactive file cache."""

from __future__ import annotations

from pathlib import Path

from app.host.cgroup import CGROUP, read_file

MEMINFO = Path("/proc/meminfo")


def _counter(text: str | None, name: str) -> int | None:
    """One counter of a kernel file of "name value" lines (``memory.stat``) or "name: value kB" lines
    (``/proc/meminfo``), in the file's unit; None where it is missing."""
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0].rstrip(":") == name and fields[1].isdigit():
            return int(fields[1])
    return None


def _cgroup_room(root: Path) -> int | None:
    limit, used = read_file(root / "memory.max"), read_file(root / "memory.current")  # cgroup v2
    stat, inactive_file = root / "memory.stat", "inactive_file"
    if limit is None or used is None:
        v1 = root / "memory"
        limit, used = read_file(v1 / "memory.limit_in_bytes"), read_file(v1 / "memory.usage_in_bytes")
        stat, inactive_file = v1 / "memory.stat", "total_inactive_file"
    if limit is None or used is None or not limit.isdigit() or not used.isdigit():
        return None
    if int(limit) >= 1 << 60:  # v1's "no limit"
        return None
    working_set = max(0, int(used) - (_counter(read_file(stat), inactive_file) or 0))
    return max(0, int(limit) - working_set)


def _meminfo_available(meminfo: Path) -> int | None:
    kib = _counter(read_file(meminfo), "MemAvailable")
    return None if kib is None else kib * 1024


def available_memory_bytes(cgroup: Path = CGROUP, meminfo: Path = MEMINFO) -> int | None:
    """Bytes this process may still allocate; None when neither source can be read."""
    rooms = [room for room in (_cgroup_room(cgroup), _meminfo_available(meminfo)) if room is not None]
    return min(rooms) if rooms else None
