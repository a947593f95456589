"""-kvu on the real model: the slots share one KV cache, so one slot may take a prompt longer than
ctx-size / parallel, and several slots still generate together."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from tests.integration.conftest import start

LONG = "The quick brown fox jumps over the lazy dog. " * 110  # about 1,100 tokens


def test_a_shared_cache_takes_a_prompt_longer_than_a_slots_share(server_dir: Path) -> None:
    split = start(server_dir, ["-np", "4", "-c", "2048"])
    try:
        refused = requests.post(split.url("/completion"), json={"prompt": LONG, "n_predict": 2}, timeout=60)
        assert refused.status_code == 400 and refused.json()["error"]["type"] == "exceed_context_size_error"
    finally:
        assert split.stop() == 0, split.log()
    shared = start(server_dir, ["-np", "4", "-c", "2048", "-kvu"])
    try:
        props = requests.get(shared.url("/props"), timeout=10).json()
        assert props["default_generation_settings"]["n_ctx"] == 2048 and props["total_slots"] == 4
        long = requests.post(shared.url("/completion"), json={"prompt": LONG, "n_predict": 4, "ignore_eos": True},
                             timeout=120)
        assert long.status_code == 200 and long.json()["tokens_predicted"] == 4
        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(lambda n: requests.post(shared.url("/completion"), timeout=120, json={
                "prompt": f"Story number {n}:", "n_predict": 8, "ignore_eos": True}).json(), range(4)))
        assert all(reply["tokens_predicted"] == 8 for reply in replies)
        assert len({reply["id_slot"] for reply in replies}) > 1
    finally:
        assert shared.stop() == 0, shared.log()


def test_kv_unified_per_slot_sizes_the_pool_and_caps_each_slot(server_dir: Path) -> None:
    """--kv-unified-per-slot without -c: the shared pool is --parallel x N, and no slot takes more than N (a
    prompt longer than N is refused though the pool has room), as llama-server's n_ctx_slot."""
    server = start(server_dir, ["-np", "2", "-kvu", "--kv-unified-per-slot", "1024"])
    try:
        props = requests.get(server.url("/props"), timeout=10).json()
        assert props["default_generation_settings"]["n_ctx"] == 1024
        assert all(slot["n_ctx"] == 1024 for slot in requests.get(server.url("/slots"), timeout=10).json())
        refused = requests.post(server.url("/completion"), json={"prompt": LONG, "n_predict": 2}, timeout=60)
        assert refused.status_code == 400 and refused.json()["error"]["type"] == "exceed_context_size_error"
        short = requests.post(server.url("/completion"), json={"prompt": LONG[:2000], "n_predict": 4,
                                                                "ignore_eos": True}, timeout=120)
        assert short.status_code == 200 and short.json()["tokens_predicted"] == 4
        # the pool: 2 x 1024, all of it one slot's share with -kvu, held to 1024 a slot
        assert "capping each slot's context (2048) to --kv-unified-per-slot (1024)" in server.log()
    finally:
        assert server.stop() == 0, server.log()
