"""The prompt cache (--cache-ram) on the fake backend: a prompt that left its slot comes back into
any slot, with the same answer; the byte limit, the oldest-first eviction and the rule that a
kept prefix is not kept twice; and the default size."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config.settings import parse_settings
from app.engine import Completion, Engine, EngineOptions, GenerationRequest
from app.engine.backend import SequenceState
from app.engine.prompt_cache import PromptCache
from app.engine.slots import Job
from app.host.memory import available_memory_bytes
from tests.fakes import FakeBackend, completion_of, encode, running_engine

LONG_A = "A system prompt that many requests share, " * 4 + "first question>"
LONG_B = "Something else entirely, with no prefix in common, " * 3 + "second>"


def run(engine: Engine, prompt: str) -> Completion:
    job: Job = engine.submit(GenerationRequest(prompt=tuple(encode(prompt)), n_predict=8))
    return completion_of(job, timeout=5)


def engine_with(backend: FakeBackend, cache_bytes: int | None) -> Iterator[Engine]:
    with running_engine(backend, EngineOptions(prompt_cache_bytes=cache_bytes)) as engine:
        yield engine


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend(reply_for=lambda prompt: f"<{len(prompt)}>", n_seq=1, n_ctx_seq=1024, n_batch=64)


@pytest.fixture
def cached_engine(backend: FakeBackend) -> Iterator[Engine]:
    yield from engine_with(backend, 1 << 20)


def test_a_prompt_that_left_its_slot_is_restored_with_the_same_answer(backend: FakeBackend,
                                                                       cached_engine: Engine) -> None:
    cold = run(cached_engine, LONG_A)
    run(cached_engine, LONG_B)  # one slot: B takes A's cells, which go to the cache
    warm = run(cached_engine, LONG_A)
    assert warm.text == cold.text
    assert cold.timings.cache_n == 0
    assert warm.timings.cache_n == len(encode(LONG_A)) - 1
    assert backend.state_writes == 1
    stats = cached_engine.stats()
    assert stats.prompt_cache_restores_total == 1
    assert stats.prompt_tokens_cached_total == warm.timings.cache_n
    assert stats.prompt_cache_prompts == 2 and stats.prompt_cache_bytes > 0  # A and B


def test_without_the_cache_the_prompt_is_decoded_again(backend: FakeBackend) -> None:
    for engine in engine_with(backend, 0):
        run(engine, LONG_A)
        run(engine, LONG_B)
        again = run(engine, LONG_A)
        assert again.timings.cache_n == 0
        assert backend.state_reads == backend.state_writes == 0


def test_a_slot_that_keeps_most_of_its_cells_is_not_copied(backend: FakeBackend, cached_engine: Engine) -> None:
    run(cached_engine, LONG_A)
    run(cached_engine, LONG_A[:-2] + "another question>")  # same system prompt: the slot keeps most of it
    assert backend.state_reads == 0


@pytest.mark.parametrize(("held", "copied"), [(49, 1), (48, 1), (47, 0)])
def test_a_slot_is_copied_when_the_next_job_keeps_half_of_it_or_less(held: int, copied: int) -> None:
    """llama-server's f_keep < 0.5, in its floats: 24 tokens kept of 49 is under half, and 24 of 48 too
    there (24/37*37/48 rounds below 0.5), so the slot's prompt is kept in the cache for the next request
    that asks for it again; 24 of 47 is more than half (it is not)."""
    backend = FakeBackend(reply_for=lambda prompt: "", n_seq=1, n_ctx_seq=1024, n_batch=64)
    for engine in engine_with(backend, 1 << 20):
        run(engine, "s" * 24 + "a" * (held - 24))
        run(engine, "s" * 24 + "b" * 5)
        assert backend.state_reads == copied


def entry_state(n: int) -> SequenceState:
    return SequenceState(b"x" * n, n)


def test_the_limit_evicts_the_oldest_and_a_kept_prefix_is_not_kept_twice() -> None:
    cache = PromptCache(limit_bytes=250)
    assert cache.keep([1, 2, 3], (), lambda: entry_state(100))
    assert cache.keep([7, 8, 9], (), lambda: entry_state(100))
    assert not cache.keep([1, 2], (), lambda: entry_state(100))  # a kept state holds it all
    assert cache.keep([1, 2, 3, 4], (), lambda: entry_state(100))  # extends [1, 2, 3]: replaces it
    assert len(cache) == 2 and cache.size_bytes == 200
    assert cache.keep([5, 5, 5], (), lambda: entry_state(100))  # over 250: the oldest ([7, 8, 9]) goes
    assert cache.best([7, 8, 9, 10], ()) is None
    found = cache.best([1, 2, 3, 4, 5], ())
    assert found is not None and found[1] == 4
    assert not cache.keep([6, 6], (), lambda: entry_state(300))  # alone over the limit


def test_best_takes_the_longest_reusable_prefix() -> None:
    cache = PromptCache(limit_bytes=None)
    cache.keep([1, 2, 9], (), lambda: entry_state(10))
    cache.keep([1, 2, 3, 4, 9], (), lambda: entry_state(10))
    found = cache.best([1, 2, 3, 4, 5], ())
    assert found is not None and found[0].tokens == (1, 2, 3, 4, 9) and found[1] == 4
    assert cache.best([1, 2, 3, 4], ()) == (found[0], 3)  # one prompt token is always decoded again


def test_the_default_size_is_held_to_a_quarter_of_the_available_memory() -> None:
    settings = parse_settings([], {})
    assert settings.prompt_cache_bytes(None) == 8192 << 20
    assert settings.prompt_cache_bytes(4 << 30) == 1 << 30
    assert settings.prompt_cache_bytes(64 << 30) == 8192 << 20
    assert parse_settings(["--cache-ram", "0"], {}).prompt_cache_bytes(64 << 30) == 0
    assert parse_settings(["-cram", "-1"], {}).prompt_cache_bytes(1 << 30) is None
    assert parse_settings([], {"LLAMA_ARG_CACHE_RAM": "100"}).prompt_cache_bytes(None) == 100 << 20


def test_available_memory_from_the_cgroup_or_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n")
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    assert available_memory_bytes(cgroup, meminfo) == 20000000 * 1024
    (cgroup / "memory.max").write_text("4294967296\n")
    (cgroup / "memory.current").write_text("1073741824\n")
    assert available_memory_bytes(cgroup, meminfo) == 3 << 30  # the container's room is smaller
    (cgroup / "memory.max").write_text("max\n")
    assert available_memory_bytes(cgroup, meminfo) == 20000000 * 1024
    assert available_memory_bytes(tmp_path / "none", tmp_path / "none") is None


def test_the_cgroup_room_leaves_out_the_inactive_file_cache(tmp_path: Path) -> None:
    """A model read or downloaded fills the container's page cache, which the kernel reclaims before it
    fails an allocation: the room is the limit less the working set (usage less inactive_file)."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   20000000 kB\n")
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("8589934592\n")  # 8 GiB, 7 GiB of it used, 5 GiB of that cache
    (v2 / "memory.current").write_text(f"{7 << 30}\n")
    (v2 / "memory.stat").write_text(f"anon {2 << 30}\nfile {5 << 30}\nactive_file {1 << 30}\n"
                                    f"inactive_file {4 << 30}\n")
    assert available_memory_bytes(v2, meminfo) == 5 << 30  # 8 - (7 - 4)
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{8 << 30}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{7 << 30}\n")
    (v1 / "memory.stat").write_text(f"inactive_file {1 << 30}\ntotal_inactive_file {3 << 30}\n")
    assert available_memory_bytes(v1.parent, meminfo) == 4 << 30  # the hierarchy's total counts
    (v1 / "memory.stat").write_text(f"total_inactive_file {9 << 30}\n")  # a stale read: never past the limit
    assert available_memory_bytes(v1.parent, meminfo) == 8 << 30


def test_an_idle_slot_is_offered_to_the_cache_once_until_its_cells_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """--cache-idle-slots compares an idle slot's cells with every kept prompt: done once per content
    of the cells, not again at every request that starts elsewhere."""
    offered: list[tuple[int, ...]] = []
    keep = PromptCache.keep

    def counting(cache: PromptCache, tokens: tuple[int, ...], *rest: object) -> bool:
        offered.append(tuple(tokens))
        return keep(cache, tokens, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(PromptCache, "keep", counting)
    backend = FakeBackend(reply_for=lambda prompt: "ok", n_seq=3, n_ctx_seq=1024, n_batch=64)
    with running_engine(backend, EngineOptions(prompt_cache_bytes=1 << 20)) as engine:
        for prompt in (LONG_A, LONG_B, "Zebras, a third prompt>"):  # one slot each, the least recently used
            run(engine, prompt)
    first = tuple(encode(LONG_A))
    assert sum(tokens[:len(first)] == first for tokens in offered) == 1
    assert len(offered) == 2  # slot 0 when the second request started; slot 1 (only) at the third
