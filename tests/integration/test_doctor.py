"""``python -m gcp doctor`` on generated GGUF models in the storage emulator, with the Vertex stand-in
answering the IAM Policy Troubleshooter and the Cloud Quotas API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest

from gcp.cli import main
from gcp.gguf_header import read_gguf_header
from tests.integration.conftest import storage_emulator
from tests.vertex_standin import RunningStandIn, VertexStandIn

SERVING = "serving@demo.iam.gserviceaccount.com"
L4_QUOTA = {"quotaId": "CustomModelServingL4GPUsPerProjectPerRegion",
            "metric": "aiplatform.googleapis.com/custom_model_serving_nvidia_l4_gpus",
            "dimensionsInfos": [{"dimensions": {"region": "europe-west4"}, "details": {"value": "16"}},
                                {"dimensions": {"region": "us-central1"}, "details": {"value": "4"}}]}
OTHER_QUOTAS = [{"quotaId": f"Other{i}", "metric": f"aiplatform.googleapis.com/other_{i}",
                 "dimensionsInfos": [{"dimensions": {"region": "us-central1"}, "details": {"value": "1"}}]}
                for i in range(3)]


def write_model(path: Path, kv_heads: int, context: int) -> Path:
    """A llama-shaped GGUF: 32 layers of 4096, a 60,000-token vocabulary (a header of over 1 MB)
    and 8 MB of tensor data after it."""
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_block_count(32)
    writer.add_embedding_length(4096)
    writer.add_head_count(32)
    writer.add_head_count_kv(kv_heads)
    writer.add_context_length(context)
    writer.add_file_type(15)  # Q4_K_M
    writer.add_token_list([f"token-{i}" for i in range(60_000)])
    writer.add_tensor("token_embd.weight", np.zeros((2048, 1024), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(4096, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("doctor")
    with storage_emulator():
        from google.cloud import storage

        client = storage.Client()
        models = client.create_bucket("doctor-models")
        models.blob("small/model.gguf").upload_from_filename(str(write_model(folder / "small.gguf", 8, 8192)))
        models.blob("long/model.gguf").upload_from_filename(str(write_model(folder / "long.gguf", 32, 131072)))
        client.close()
        yield "doctor-models"


@pytest.fixture
def standin() -> Iterator[RunningStandIn]:
    running = RunningStandIn(VertexStandIn("http://127.0.0.1:9"))
    running.standin.grants[(SERVING, "doctor-models")] = {"storage.objects.get",
                                                                             "storage.objects.list"}
    running.standin.quota_infos = [*OTHER_QUOTAS, L4_QUOTA]
    yield running
    running.close()


def doctor(standin: RunningStandIn, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = 0
    try:
        main(["doctor", "--project", "demo", "--region", "us-central1", "--anonymous", "--iam-endpoint", standin.url,
              "--quotas-endpoint", standin.url, *argv])
    except SystemExit as exited:
        code = int(exited.code or 0)
    out = capsys.readouterr().out
    print(out)  # shown when a test fails
    return code, out.splitlines()


def line(lines: list[str], check: str) -> str:
    return next(text for text in lines if text[6:].startswith(check + ":"))


def test_a_model_that_fits(bucket: str, standin: RunningStandIn, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = doctor(standin, capsys, "--model", f"gs://{bucket}/small/", "--ctx-size", "16384",
                         "--service-account", SERVING, "--max-replicas", "2")
    assert code == 0, lines
    assert not [text for text in lines if text.startswith(("FAIL", "WARN"))], lines
    assert "llama" in line(lines, "model") and "Q4_K_M" in line(lines, "model")
    # 32 layers x 16,384 tokens x 8 KV heads x (128 + 128) values x 2 bytes = 2 GiB
    assert "KV cache 2.0 GiB for 16384 tokens (4 slots of 4096)" in line(lines, "kv cache")
    assert "all 32 layers fit" in line(lines, "gpu memory")
    assert line(lines, "quota").endswith("limit 4, the deployment needs up to 2 (1 x 2 replicas)")
    assert "storage.objects.get" in line(lines, "model access") and "granted" in line(lines, "model access")
    read_kib = int(line(lines, "model").split("(")[-1].split(" KiB")[0])
    assert 1024 < read_kib < 4096  # the header (over 1 MB) in a few doubling reads, not the 9 MB file


def test_a_model_that_does_not_fit_says_what_to_change(
    bucket: str, standin: RunningStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = doctor(standin, capsys, "--model", f"gs://{bucket}/long/model.gguf", "--service-account",
                         "stranger@demo.iam.gserviceaccount.com", "--max-replicas", "8")
    assert code == 1
    # --ctx-size 0 takes the model's 131,072 tokens: a 64 GiB KV cache on one 24 GiB L4
    assert "KV cache 64.0 GiB for 131072 tokens" in line(lines, "kv cache")
    gpu = line(lines, "gpu memory")
    assert gpu.startswith("FAIL") and "not one layer fits beside the KV cache" in gpu
    fix = lines[lines.index(gpu) + 1]
    fitting = int(fix.split("--ctx-size ")[1].split()[0])
    # 95 % of 24 GiB, less weights and compute buffers, at 0.5 MiB of KV cache a token
    assert 45_000 < fitting < 46_700 and fitting % 256 == 0
    assert line(lines, "quota").startswith("FAIL") and "needs up to 8" in line(lines, "quota")
    access = line(lines, "model access")
    assert access.startswith("FAIL") and "not_granted" in access
    assert lines[lines.index(access) + 1] == (
        "      fix: gcloud storage buckets add-iam-policy-binding gs://doctor-models "
        "--member=serviceAccount:stranger@demo.iam.gserviceaccount.com --role=roles/storage.objectViewer")


def test_without_a_service_account_the_access_check_says_what_it_cannot_know(
    bucket: str, standin: RunningStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = doctor(standin, capsys, "--model", f"gs://{bucket}/small/", "--ctx-size", "4096",
                         "--accelerator-type", "none", "--machine-type", "n1-standard-4")
    assert code == 0
    assert line(lines, "model access").startswith("WARN") and "gcp-sa-aiplatform-cc" in line(lines, "model access")
    assert line(lines, "quota") == "PASS  quota: no accelerator: no GPU quota needed"
    assert line(lines, "host memory").startswith("PASS")


def test_the_header_reader_asks_for_more_only_as_it_needs(tmp_path: Path) -> None:
    data = write_model(tmp_path / "m.gguf", 8, 4096).read_bytes()
    reads: list[tuple[int, int]] = []

    def read(start: int, length: int) -> bytes:
        reads.append((start, length))
        return data[start:start + length]

    header = read_gguf_header(read)
    assert header.metadata["llama.block_count"] == 32 and len(header.metadata["tokenizer.ggml.tokens"]) == 60_000
    assert header.tensors == {"token_embd.weight": (1024, 2048), "output_norm.weight": (4096,)}
    assert header.parameters == 1024 * 2048 + 4096
    assert [start for start, _ in reads] == sorted({start for start, _ in reads})  # each byte fetched once
    assert header.bytes_read < len(data) / 2 and header.header_bytes <= header.bytes_read
