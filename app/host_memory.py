"""The memory this process may still use: the cgroup's limit less its usage (a container), else the
kernel's MemAvailable. Read once at start-up (the prompt cache's default size)."""

from __future__ import annotations

from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cgroup_room(root: Path) -> int | None:
    limit, used = _read(root / "memory.max"), _read(root / "memory.current")  # cgroup v2
    if limit is None or used is None:
        limit, used = _read(root / "memory" / "memory.limit_in_bytes"), _read(root / "memory" / "memory.usage_in_bytes")
    if limit is None or used is None or not limit.isdigit() or not used.isdigit():
        return None
    if int(limit) >= 1 << 60:  # v1's "no limit"
        return None
    return max(0, int(limit) - int(used))


def _meminfo_available(meminfo: Path) -> int | None:
    for line in (_read(meminfo) or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def available_memory_bytes(cgroup: Path = CGROUP, meminfo: Path = MEMINFO) -> int | None:
    """Bytes this process may still allocate; None when neither source can be read."""
    rooms = [room for room in (_cgroup_room(cgroup), _meminfo_available(meminfo)) if room is not None]
    return min(rooms) if rooms else None
