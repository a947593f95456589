"""The memory this process may still use: the cgroup's limit less its usage (a container), else the
kernel's MemAvailable. Read once at start-up (the prompt cache's default size)."""

from __future__ import annotations

from pathlib import Path

from app.cgroup import CGROUP, read_file

MEMINFO = Path("/proc/meminfo")


def _cgroup_room(root: Path) -> int | None:
    limit, used = read_file(root / "memory.max"), read_file(root / "memory.current")  # cgroup v2
    if limit is None or used is None:
        v1 = root / "memory"
        limit, used = read_file(v1 / "memory.limit_in_bytes"), read_file(v1 / "memory.usage_in_bytes")
    if limit is None or used is None or not limit.isdigit() or not used.isdigit():
        return None
    if int(limit) >= 1 << 60:  # v1's "no limit"
        return None
    return max(0, int(limit) - int(used))


def _meminfo_available(meminfo: Path) -> int | None:
    for line in (read_file(meminfo) or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def available_memory_bytes(cgroup: Path = CGROUP, meminfo: Path = MEMINFO) -> int | None:
    """Bytes this process may still allocate; None when neither source can be read."""
    rooms = [room for room in (_cgroup_room(cgroup), _meminfo_available(meminfo)) if room is not None]
    return min(rooms) if rooms else None
