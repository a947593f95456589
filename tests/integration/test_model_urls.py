"""--model-url: a model downloaded from a plain HTTP server (here, one on 127.0.0.1 that takes Range
requests and sends an ETag), resumed after a download that broke off, reused while the ETag holds,
and refused when its SHA-256 is not the one the URL names."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import launch, start

MODEL = embedded_model_path().read_bytes()
SHA256 = hashlib.sha256(MODEL).hexdigest()


class ModelServer(ThreadingHTTPServer):
    requests_seen: list[tuple[str, str]]
    cut_after: int | None  # the next GET stops after this many bytes (a broken download)


class Handler(BaseHTTPRequestHandler):
    server: ModelServer

    def log_message(self, *args: object) -> None:
        pass

    def _headers(self, status: int, length: int, extra: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", '"model-v1"')
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()

    def do_HEAD(self) -> None:
        self.server.requests_seen.append(("HEAD", ""))
        self._headers(200, len(MODEL), {})

    def do_GET(self) -> None:
        wanted = self.headers.get("Range", "")
        self.server.requests_seen.append(("GET", wanted))
        start_at = int(wanted.removeprefix("bytes=").rstrip("-")) if wanted else 0
        body = MODEL[start_at:]
        extra = {"Content-Range": f"bytes {start_at}-{len(MODEL) - 1}/{len(MODEL)}"} if wanted else {}
        self._headers(206 if wanted else 200, len(body), extra)
        cut, self.server.cut_after = self.server.cut_after, None
        self.wfile.write(body[:cut] if cut is not None else body)
        if cut is not None:
            self.wfile.flush()
            self.close_connection = True


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    server = ModelServer(("127.0.0.1", 0), Handler)
    server.requests_seen, server.cut_after = [], None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_model_url_resumes_a_broken_download_then_reuses_the_file(model_server: ModelServer, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{model_server.server_address[1]}/models/smol.gguf"
    args = ["--model-url", f"{url}#sha256={SHA256}", "--model-cache-dir", str(tmp_path / "cache"), "-np", "1",
            "-c", "1024"]
    model_server.cut_after = 10 << 20  # the first download breaks off after 10 MiB
    broken = launch(tmp_path, args)
    assert broken.process.wait(120) == 4
    assert "the download ended at 10485760" in broken.log()
    parts = list((tmp_path / "cache" / "urls").glob("*/smol.gguf.part"))
    assert len(parts) == 1 and parts[0].stat().st_size == 10 << 20
    server = start(tmp_path, args)
    try:
        assert ("GET", "bytes=10485760-") in model_server.requests_seen  # resumed, not started again
        reply = requests.post(server.url("/v1/chat/completions"), timeout=60, json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        assert reply.status_code == 200
    finally:
        assert server.stop() == 0, server.log()
    model_server.requests_seen.clear()
    again = start(tmp_path, args)  # the same ETag: the cached file, no download
    try:
        assert model_server.requests_seen == [("HEAD", "")]
    finally:
        assert again.stop() == 0, again.log()


def test_a_model_url_whose_sha256_differs_is_refused(model_server: ModelServer, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{model_server.server_address[1]}/models/smol.gguf#sha256={'0' * 64}"
    refused = launch(tmp_path, ["--model-url", url, "--model-cache-dir", str(tmp_path / "cache")])
    assert refused.process.wait(120) == 4
    assert "SHA-256 is not" in refused.log()
    assert not list((tmp_path / "cache" / "urls").glob("*/smol.gguf"))  # nothing kept
