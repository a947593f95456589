"""--fit on the real model: with --fit-target leaving room for only part of the model's context
(8192 tokens of KV, about 180 MiB), -c 0 takes less, logged; --fit off, or a given -c, keeps it."""

from __future__ import annotations

from pathlib import Path

import requests

from app.host_memory import available_memory_bytes
from tests.integration.conftest import start

MIB = 1 << 20
# the embedded model's weights and its compute buffers at -ub 64, then about 1300 tokens of KV
NEEDED_MIB = 97 + 78 + 30


def slot_context(server_dir: Path, args: list[str]) -> tuple[int, str]:
    available = available_memory_bytes()
    assert available is not None
    margin = available // MIB - NEEDED_MIB
    server = start(server_dir, ["-np", "1", "-ub", "64", "-cram", "0", "-fitc", "512", "-fitt", str(margin), *args])
    try:
        n_ctx = requests.get(server.url("/props"), timeout=10).json()["default_generation_settings"]["n_ctx"]
    finally:
        assert server.stop() == 0, server.log()
    return int(n_ctx), server.log()


def test_the_context_shrinks_to_the_room_fit_target_leaves(server_dir: Path) -> None:
    n_ctx, log = slot_context(server_dir, [])
    assert 512 < n_ctx < 8192 and n_ctx % 256 == 0  # above --fit-ctx: the room the margin left
    assert f"--fit: context 8192 -> {n_ctx} tokens to fit the free memory" in log


def test_fit_off_and_a_given_context_keep_it(server_dir: Path) -> None:
    assert slot_context(server_dir, ["--fit", "off"])[0] == 8192
    n_ctx, log = slot_context(server_dir, ["-c", "6144"])
    assert n_ctx == 6144 and "may not fit" in log
