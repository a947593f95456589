"""The CPUs a container may use: its affinity held to its cgroup CPU quota (v2 and v1)."""

from __future__ import annotations

import os
from pathlib import Path

from app.config.settings import parse_settings
from app.host.cpus import cpu_quota, usable_cpus


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert cpu_quota(tmp_path) == 2.5
    assert usable_cpus(tmp_path) == min(3, len(os.sched_getaffinity(0)))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpu_quota(tmp_path) is None and usable_cpus(tmp_path) == len(os.sched_getaffinity(0))


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000")
    assert cpu_quota(tmp_path) == 1.0 and usable_cpus(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert cpu_quota(tmp_path) is None


def test_no_cgroup_means_the_affinity() -> None:
    assert usable_cpus(Path("/nonexistent")) == len(os.sched_getaffinity(0))


def test_threads_default_to_the_usable_cpus() -> None:
    assert parse_settings([], {}).cpu_threads == usable_cpus()
    assert parse_settings(["-t", "3"], {}).cpu_threads == 3
