"""llama-server's loading flags on a real server: --override-kv changes the model's metadata (here:
whether the tokenizer adds a BOS token), --load-mode decides whether the file is memory-mapped,
--check-tensors refuses a model holding a NaN, --numa starts, --no-warmup skips the warm-up, the --log-*
flags reach the server's log, and -v llama.cpp's own lines. One server at a time."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import gguf
import requests

from tests.integration.conftest import Server, launch, start
from tests.models import make_reranker

BOS = 1  # the embedded SmolLM2's BOS id; its tokenizer does not add it (add_bos_token false)


def first_tokens(server: Server) -> list[int]:
    response = requests.post(server.url("/tokenize"), json={"content": "hello", "add_special": True}, timeout=30)
    assert response.status_code == 200, response.text
    tokens: list[int] = response.json()["tokens"]
    return tokens


def worker_maps(server: Server) -> str:
    """/proc/PID/maps of the gunicorn worker (the master's only child), which holds the model."""
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
    assert len(children) == 1, children
    return Path(f"/proc/{children[0]}/maps").read_text()


def test_override_kv_changes_the_models_metadata(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "1", "-c", "512"])
    try:
        assert first_tokens(server)[0] != BOS
    finally:
        assert server.stop() == 0, server.log()
    assert "warm-up: one throw-away decode done" in server.log()
    server = start(server_dir, ["-np", "1", "-c", "512", "--override-kv", "tokenizer.ggml.add_bos_token=bool:true"])
    try:
        assert first_tokens(server)[0] == BOS
    finally:
        assert server.stop() == 0, server.log()


def test_a_bad_override_is_refused_at_start_up(server_dir: Path) -> None:
    stopped = launch(server_dir, ["--override-kv", "tokenizer.ggml.add_bos_token=bool:maybe"])
    assert stopped.process.wait(60) == 2
    assert "--override-kv" in stopped.log() and "true or false" in stopped.log()


def test_load_mode_none_reads_the_model_instead_of_mapping_it(server_dir: Path) -> None:
    mapped = []
    for args in ([], ["--load-mode", "none"], ["--no-mmap"]):
        server = start(server_dir, ["-np", "1", "-c", "512", *args])
        try:
            model = requests.get(server.url("/props"), timeout=10).json()["model_path"]
            mapped.append(model in worker_maps(server))
            assert first_tokens(server)  # it serves
        finally:
            assert server.stop() == 0, server.log()
    assert mapped == [True, False, False]
    assert "--no-mmap: replaced by --load-mode in llama.cpp; taken as --load-mode none" in server.log()


def nan_model(path: Path) -> Path:
    """A generated model with one NaN in a float32 tensor: it loads, unless its tensors are checked."""
    make_reranker(path)
    reader = gguf.GGUFReader(path)
    tensor = next(t for t in reader.tensors if t.tensor_type == gguf.GGMLQuantizationType.F32 and
                  t.name.endswith("attn_q.weight"))
    offset = tensor.data_offset
    del reader
    with path.open("r+b") as handle:
        handle.seek(offset)
        handle.write(struct.pack("<f", float("nan")))
    return path


def test_check_tensors_refuses_a_model_with_a_nan(server_dir: Path, tmp_path: Path) -> None:
    model = str(nan_model(tmp_path / "nan.gguf"))
    server = start(server_dir, ["-m", model, "-np", "1", "-c", "256", "--embeddings"])
    assert server.stop() == 0, server.log()  # unchecked, it loads (and would compute NaNs)
    stopped = launch(server_dir, ["-m", model, "-np", "1", "-c", "256", "--embeddings", "--check-tensors"])
    assert stopped.process.wait(120) == 4, stopped.log()
    assert "--check-tensors" in stopped.log()
    assert "ERROR llama.cpp: load_all_data: tensor 'blk.0.attn_q.weight' has invalid data" in stopped.log()


def test_numa_distribute_starts_and_no_warmup_skips_the_warm_up(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "1", "-c", "512", "--numa", "distribute", "--no-warmup"])
    try:
        assert first_tokens(server)
    finally:
        assert server.stop() == 0, server.log()
    assert "warm-up" not in server.log()


def test_the_log_flags_reach_the_server(server_dir: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    server = start(server_dir, ["-np", "1", "-c", "512", "--log-file", str(log_file), "--log-jsonl"])
    try:
        assert first_tokens(server)
    finally:
        assert server.stop() == 0, server.log()
    entries = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert any(entry["message"].startswith("model loaded") for entry in entries)
    assert all({"severity", "message", "logger"} <= set(entry) for entry in entries)
    assert not any(entry["logger"] == "llama.cpp" for entry in entries)  # llama.cpp's lines: errors only


def test_verbose_logs_llama_cpp_s_own_lines(server_dir: Path) -> None:
    """-v: llama.cpp's information and debug lines too (the default log has its errors only; the C
    filter of app/engine/llama/native.c drops the rest before they reach Python)."""
    server = start(server_dir, ["-np", "1", "-c", "512", "-v"])
    try:
        assert first_tokens(server)
    finally:
        assert server.stop() == 0, server.log()
    lines = [line for line in server.log().splitlines() if " llama.cpp: " in line]
    assert any("INFO llama.cpp: llama_context: n_ctx" in line for line in lines), server.log()[-3000:]
    assert any("llama_kv_cache: layer" in line for line in lines)  # a debug line of llama.cpp's


def test_tensor_overrides_and_device_lists_reach_llama_cpp(tmp_path: Path) -> None:
    """-ot, --cpu-moe, --n-cpu-moe, --n-cpu-ffn and -dev none with the real model: llama.cpp places the
    named tensors (its log says so for each) and the model serves."""
    server = start(tmp_path, ["-np", "1", "-c", "512", "-v", "-ot", r"blk\.0\.attn_q.*=CPU,output_norm=CPU",
                              "--cpu-moe", "--n-cpu-moe", "2", "--n-cpu-ffn", "1", "-dev", "none"])
    try:
        reply = requests.post(server.url("/v1/chat/completions"), timeout=60, json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] > 0
        placed = set(re.findall(r"tensor (\S+) \([^)]*\) buffer type overridden to CPU", server.log()))
        assert {"blk.0.attn_q.weight", "output_norm.weight"} <= placed
        assert {"blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "blk.0.ffn_gate.weight"} <= placed  # --n-cpu-ffn 1
        assert not any(name.startswith("blk.1.") for name in placed)  # SmolLM2 has no experts: --*-moe place none
    finally:
        assert server.stop() == 0, server.log()


def test_an_unknown_buffer_type_or_device_stops_the_start_naming_it(tmp_path: Path) -> None:
    for args, message in ((["-ot", "output=NOPE0"], "unknown buffer type (available: CPU"),
                          (["--device", "NOPE0"], "--device: invalid device: NOPE0")):
        server = launch(tmp_path, ["-np", "1", "-c", "512", *args])
        assert server.process.wait(120) == 4
        assert message in server.log()
