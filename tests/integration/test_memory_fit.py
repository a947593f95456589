"""--fit on the real model: with --fit-target leaving room for about half of the model's context
(8192 tokens of KV, about 180 MiB), -c 0 takes less, logged; --fit off, or a given -c, keeps it."""

from __future__ import annotations

from pathlib import Path

import requests

from app.host.memory import available_memory_bytes
from tests.integration.conftest import start

MIB = 1 << 20
# the embedded model's weights and its compute buffers at -ub 64, then room for about 4000 tokens of
# KV (22.5 KiB a token) less what the server's own processes take before they read the free memory:
# mid-way between --fit-ctx (512) and the model's 8192, so a machine whose free memory moves by tens
# of MiB between the test's reading and the server's still lands inside
NEEDED_MIB = 97 + 78 + 100


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
    n_ctx, log = slot_context(server_dir, ["-c", "7936"])  # 174 MiB of KV: well past the room
    assert n_ctx == 7936 and "may not fit" in log
