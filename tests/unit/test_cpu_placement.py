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


def test_each_thread_pool_defaults_to_its_role_model_as_in_llama_server() -> None:
    """Prompt processing's pool follows generation's; the draft model's follow the target's (its prompt pool
    the target's prompt pool), field by field."""
    from app.config.engine_config import thread_placements

    cpus = sorted(os.sched_getaffinity(0))
    first, last = cpus[0], cpus[-1]
    generation, batch, draft, draft_batch = thread_placements(parse_settings(
        ["--cpu-range", f"{first}-{first}", "--cpu-strict", "1", "--poll", "20", "--prio-batch", "0",
         "--cpu-range-batch", f"{last}-{last}", "--spec-draft-poll", "70", "--spec-draft-cpu-strict-batch", "0"], {}))
    assert (generation.cpus, generation.strict, generation.poll) == (frozenset({first}), True, 20)
    assert (batch.cpus, batch.strict, batch.poll) == (frozenset({last}), True, 20)
    assert (draft.cpus, draft.strict, draft.poll) == (frozenset({first}), True, 70)
    assert (draft_batch.cpus, draft_batch.strict, draft_batch.poll) == (frozenset({last}), False, 20)
    plain = thread_placements(parse_settings([], {}))
    assert all((pool.cpus, pool.strict, pool.prio, pool.poll) == (frozenset(), False, 0, 50) for pool in plain)
    with pytest.raises(SettingsError, match="--cpu-mask-batch"):
        parse_settings(["--cpu-mask-batch", "xyz"], {}, error=lambda message: None)
    with pytest.raises(SettingsError, match="--spec-draft-cpu-range"):
        parse_settings(["--spec-draft-cpu-range", "9-1"], {}, error=lambda message: None)


def test_a_real_time_priority_only_where_the_process_may_set_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above normal, ggml's thread priority is SCHED_FIFO: without CAP_SYS_NICE or an RLIMIT_RTPRIO it fails at
    every graph, so the pool stays normal (and says so)."""
    from app.host.cpu_placement import thread_priority_allowed

    assert thread_priority_allowed(0) and thread_priority_allowed(-1)
    with_nice = "Name:\tx\nCapEff:\t0000000000800000\n"
    without = "Name:\tx\nCapEff:\t0000000000000000\n"
    monkeypatch.setattr("resource.getrlimit", lambda which: (0, 0))
    assert thread_priority_allowed(1, with_nice) and not thread_priority_allowed(1, without)
    monkeypatch.setattr("resource.getrlimit", lambda which: (80, 80))  # RLIMIT_RTPRIO 80: medium and high
    assert thread_priority_allowed(2, without) and not thread_priority_allowed(3, without)


def test_a_pools_parameters_are_ggmls_struct() -> None:
    from app.engine.llama.config import ThreadPlacement
    from app.engine.llama.threadpool import ThreadPoolParams, pool_params, same_pool

    params = pool_params(3, ThreadPlacement(cpus=frozenset({1, 4}), strict=True, prio=2, poll=10))
    assert [index for index, on in enumerate(params.cpumask) if on] == [1, 4]
    assert (params.n_threads, params.prio, params.poll, params.strict_cpu, params.paused) == (3, 2, 10, True, False)
    assert same_pool(params, pool_params(3, ThreadPlacement(cpus=frozenset({1, 4}), strict=True, prio=2, poll=10)))
    assert not same_pool(params, pool_params(2, ThreadPlacement(cpus=frozenset({1, 4}), strict=True, prio=2, poll=10)))
    import ctypes
    assert ctypes.sizeof(ThreadPoolParams) == 512 + 4 + 4 + 4 + 1 + 1 + 2  # ggml.h's layout, padded to 4
