"""Models from Cloud Storage, against gcp-storage-emulator on 127.0.0.1 through the real
google-cloud-storage client: gs:// files, directories, split GGUFs, AIP_STORAGE_URI, the cache."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gguf
import pytest
import requests
from gguf.scripts.gguf_new_metadata import copy_with_new_metadata, get_field_data

import app.model_sources.gcs as storage_module
from app.model_sources.files import embedded_model_path
from app.model_sources.gcs import fetch_model
from tests.integration.conftest import Server, launch, start, storage_emulator
from tests.projectors import make_vision_projector


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with storage_emulator() as host:
        from google.cloud import storage

        client = storage.Client()
        bucket = client.create_bucket("models")
        model = embedded_model_path()
        bucket.blob("smol/model.gguf").upload_from_filename(str(model))
        split_dir = tmp_path_factory.mktemp("split")
        reader = gguf.GGUFReader(str(model))
        writer = gguf.GGUFWriter(str(split_dir / "smol.gguf"),
                                 arch=get_field_data(reader, gguf.Keys.General.ARCHITECTURE), split_max_tensors=150)
        copy_with_new_metadata(reader, writer, {}, [])
        parts = sorted(split_dir.glob("smol-*-of-*.gguf"))
        assert len(parts) == 2
        for part in parts:
            bucket.blob(f"split/{part.name}").upload_from_filename(str(part))
        bucket.blob("ambiguous/a.gguf").upload_from_string(b"GGUF")
        bucket.blob("ambiguous/b.gguf").upload_from_string(b"GGUF")
        bucket.blob("empty/readme.txt").upload_from_string(b"no model here")
        projector = make_vision_projector(tmp_path_factory.mktemp("projector") / "mmproj-test.gguf")
        for name in ("vlm/model.gguf", "two-projectors/model.gguf"):
            bucket.blob(name).upload_from_filename(str(model))
        for name in ("vlm/mmproj-test.gguf", "two-projectors/mmproj-a.gguf", "two-projectors/mmproj-b.gguf"):
            bucket.blob(name).upload_from_filename(str(projector))
        client.close()  # its HTTP session's sockets
        yield host


def serve(tmp_path: Path, emulator: str, args: list[str], env: dict[str, str] | None = None) -> Server:
    return start(tmp_path, [*args, "--model-cache-dir", str(tmp_path / "cache"), "-np", "2", "-c", "2048"],
                 {"STORAGE_EMULATOR_HOST": emulator, **(env or {})})


def chat(server: Server) -> str:
    reply = requests.post(server.url("/v1/chat/completions"), timeout=60, json={
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def test_a_gguf_object(tmp_path: Path, emulator: str) -> None:
    server = serve(tmp_path, emulator, ["--model", "gs://models/smol/model.gguf"])
    try:
        assert set(server.startup_statuses[:-1]) <= {503}
        props = requests.get(server.url("/props"), timeout=10).json()
        cached = tmp_path / "cache" / "models" / "smol" / "model.gguf"
        assert props["model_path"] == str(cached)
        assert cached.stat().st_size == embedded_model_path().stat().st_size
        assert chat(server)
        assert "downloading gs://models/smol/model.gguf" in server.log()
    finally:
        assert server.stop() == 0
    again = serve(tmp_path, emulator, ["--model", "gs://models/smol/model.gguf"])
    try:
        assert "using the cached copy of gs://models/smol/model.gguf" in again.log()
    finally:
        again.stop()


def test_a_damaged_cache_is_downloaded_again(tmp_path: Path, emulator: str) -> None:
    cached = tmp_path / "cache" / "models" / "smol" / "model.gguf"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"\0" * embedded_model_path().stat().st_size)
    server = serve(tmp_path, emulator, ["--model", "gs://models/smol/"])
    try:
        assert "downloading gs://models/smol/model.gguf" in server.log()
        assert cached.read_bytes()[:4] == b"GGUF"
        assert chat(server)
    finally:
        server.stop()


def test_a_split_gguf_directory(tmp_path: Path, emulator: str) -> None:
    server = serve(tmp_path, emulator, ["--model", "gs://models/split/"])
    try:
        props = requests.get(server.url("/props"), timeout=10).json()
        assert props["model_path"].endswith("split/smol-00001-of-00002.gguf")
        assert (tmp_path / "cache" / "models" / "split" / "smol-00002-of-00002.gguf").is_file()
        assert chat(server)
    finally:
        server.stop()


def test_a_projector_beside_the_model_is_used(tmp_path: Path, emulator: str) -> None:
    server = serve(tmp_path, emulator, ["--model", "gs://models/vlm/"])
    try:
        assert requests.get(server.url("/props"), timeout=10).json()["modalities"]["vision"] is True
        assert (tmp_path / "cache" / "models" / "vlm" / "mmproj-test.gguf").is_file()
    finally:
        assert server.stop() == 0
    plain = serve(tmp_path, emulator, ["--model", "gs://models/vlm/model.gguf", "--no-mmproj"])
    try:
        assert requests.get(plain.url("/props"), timeout=10).json()["modalities"]["vision"] is False
    finally:
        assert plain.stop() == 0


def test_aip_storage_uri(tmp_path: Path, emulator: str) -> None:
    server = serve(tmp_path, emulator, [], {"AIP_MODE": "PREDICTION", "AIP_STORAGE_URI": "gs://models/smol"})
    try:
        predictions = requests.post(server.url("/predict"), timeout=60, json={"instances": [
            {"@requestFormat": "tokenize", "content": "hello"}]}).json()["predictions"]
        assert predictions[0]["tokens"]
        assert requests.get(server.url("/props"), timeout=10).json()["model_path"].endswith("smol/model.gguf")
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("gs://no-such-bucket/model.gguf", "the bucket 'no-such-bucket' does not exist"),
        ("gs://models/missing.gguf", "gs://models/missing.gguf: no such object"),
        ("gs://models/empty/", "gs://models/empty/: no .gguf file in this directory"),
        ("gs://models/ambiguous/", "several .gguf models"),
        ("gs://models/two-projectors/", "several multimodal projectors"),
    ],
)
def test_bad_uris_stop_start_up_naming_the_uri(tmp_path: Path, emulator: str, uri: str, message: str) -> None:
    server = launch(tmp_path, ["--model", uri, "--model-cache-dir", str(tmp_path / "cache")],
                    {"STORAGE_EMULATOR_HOST": emulator})
    code = server.process.wait(120)
    assert code != 0
    assert message in server.log()


class ObjectViewerSession(requests.Session):
    """The HTTP session of a real storage client acting as an account with only
    roles/storage.objectViewer: bucket-level reads are answered 403. Every request is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        path = urlsplit(str(url)).path
        self.calls.append((str(method), path))
        if re.fullmatch(r"/storage/v1/b/[^/]+/?", path):
            denied = requests.Response()
            denied.status_code = 403
            denied._content = b'{"error": {"code": 403, "message": "no storage.buckets.get permission"}}'
            denied.headers["Content-Type"] = "application/json"
            denied.url = str(url)
            return denied
        return super().request(method, url, *args, **kwargs)


def test_the_download_needs_only_object_reads_and_a_cached_model_is_not_read_again(
    emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    session = ObjectViewerSession()
    client = storage.Client(project="test", credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                            _http=session)
    for uri in ("gs://models/smol/model.gguf", "gs://models/smol", "gs://models/split"):
        fetch_model(uri, tmp_path / "cache", client=client)
    assert any("/o/" in path for _, path in session.calls)  # the objects were read, without bucket metadata
    local = tmp_path / "cache" / "models" / "smol" / "model.gguf"
    assert local.with_name("model.gguf.gcs.json").is_file()

    def no_hashing(path: Path, expected: str | None) -> bool:
        raise AssertionError(f"{path} was read again")

    monkeypatch.setattr(storage_module, "_md5_matches", no_hashing)
    session.calls.clear()
    try:
        assert fetch_model("gs://models/smol/model.gguf", tmp_path / "cache", client=client) == local
        assert not any("alt=media" in path or "/download/" in path for _, path in session.calls)
    finally:
        client.close()
        session.close()


def test_a_router_over_a_bucket_prefix_serves_each_of_its_models(tmp_path: Path, emulator: str) -> None:
    """--models-dir gs://: a model per folder of the prefix, each child downloading its own files."""
    from app.router.catalog import load_catalog

    catalog = load_catalog("gs://models/", None)
    assert {"smol", "split", "vlm"} <= set(catalog) and "empty" not in catalog
    assert catalog["vlm"].model_argv == ("--model", "gs://models/vlm/model.gguf",
                                         "--mmproj", "gs://models/vlm/mmproj-test.gguf")
    assert catalog["split"].path == "gs://models/split/smol-00001-of-00002.gguf"
    server = serve(tmp_path, emulator, ["--models-dir", "gs://models/", "-t", "1"])
    try:
        reply = requests.post(server.url("/v1/chat/completions"), timeout=120, json={
            "model": "split", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]})
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == "split" and reply.json()["usage"]["completion_tokens"] > 0
        assert (tmp_path / "cache" / "models" / "split" / "smol-00002-of-00002.gguf").is_file()
    finally:
        assert server.stop() == 0, server.log()
