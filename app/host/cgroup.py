"""Reading the control files of this process's cgroup (and /proc): the container's limits."""

from __future__ import annotations

from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def read_file(path: Path) -> str | None:
    """A control file's text, stripped; None where it cannot be read (no such cgroup, not Linux)."""
    try:
        return path.read_text().strip()
    except OSError:
        return None
