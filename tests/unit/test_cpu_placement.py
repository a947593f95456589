"""--cpu-mask, --cpu-range, --cpu-strict, --poll, --prio: parsing and what they set (app/host/cpu_placement.py)."""

from __future__ import annotations

import os

import pytest

from app.config.settings import SettingsError, parse_settings
from app.host.cpu_placement import PlacementError, compute_cpus, openmp_environment, parse_cpu_mask, parse_cpu_range


def test_masks_and_ranges_read_as_llama_cpp_reads_them() -> None:
    assert parse_cpu_mask("0x5") == {0, 2} == parse_cpu_mask("5")
    assert parse_cpu_range("2-4") == {2, 3, 4}
    assert parse_cpu_range("-1") == {0, 1}
    assert max(parse_cpu_range("510-")) == 511
    for bad in ("0xZ", "0"):
        with pytest.raises(PlacementError, match="--cpu-mask"):
            parse_cpu_mask(bad)
    for bad in ("3", "4-2", "a-b"):
        with pytest.raises(PlacementError, match="--cpu-range"):
            parse_cpu_range(bad)


def test_the_mask_and_the_range_together_within_the_cpus_allowed() -> None:
    assert compute_cpus("0x1", "2-3", frozenset(range(8))) == frozenset({0, 2, 3})
    assert compute_cpus("0xF0", None, frozenset({4, 5})) == frozenset({4, 5})
    assert compute_cpus(None, None, frozenset({0})) is None
    with pytest.raises(PlacementError, match="may use"):
        compute_cpus("0x100", None, frozenset({0, 1}))


def test_poll_and_strictness_become_libgomp_settings() -> None:
    assert openmp_environment(None, False, 50) == {}  # the defaults change nothing
    assert openmp_environment(None, False, 0) == {"OMP_WAIT_POLICY": "passive"}
    assert openmp_environment(None, False, 100) == {"GOMP_SPINCOUNT": "600000"}
    assert openmp_environment(frozenset({3, 1}), True, 50) == {"OMP_PROC_BIND": "close", "OMP_PLACES": "{1},{3}"}


def test_threads_default_to_the_placed_cpus_and_bad_values_are_refused() -> None:
    first = min(os.sched_getaffinity(0))
    settings = parse_settings(["--cpu-range", f"{first}-{first}"], {})
    assert settings.compute_cpus == frozenset({first}) and settings.cpu_threads == 1
    assert parse_settings(["--cpu-range", f"{first}-{first}", "-t", "3"], {}).cpu_threads == 3
    for argv, says in ((["--cpu-mask", "xyz"], "--cpu-mask"), (["--prio", "4"], "--prio"),
                       (["--poll", "101"], "--poll"), (["--cpu-strict", "2"], "--cpu-strict")):
        with pytest.raises(SettingsError, match=says):
            parse_settings(argv, {}, error=lambda message: None)
