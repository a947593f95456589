"""-dr/--docker-repo: a model image from an OCI registry, as llama-server pulls Docker Hub's. The registry
here is one on 127.0.0.1 that speaks the distribution API with token authentication (a 401 naming its
token realm, a token for pulling, then the manifest and the blob), serving an image whose GGUF layer is the
embedded model; --docker-registry points the server at it."""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import launch, start

MODEL = embedded_model_path().read_bytes()
DIGEST = "sha256:" + hashlib.sha256(MODEL).hexdigest()
TOKEN = "pull-token-for-ai-smollm2"


class Registry(ThreadingHTTPServer):
    seen: list[str]  # "METHOD path" of each request
    blob: bytes  # what the blob route serves (the model, unless a test corrupts it)
    token_queries: list[dict[str, str]]


class Handler(BaseHTTPRequestHandler):
    server: Registry

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _route(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        self.server.seen.append(f"{self.command} {url.path}")
        port = self.server.server_address[1]
        if url.path == "/token":
            self.server.token_queries.append(dict(urllib.parse.parse_qsl(url.query)))
            self._send(200, json.dumps({"token": TOKEN}).encode(), head=head)
            return
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            challenge = f'Bearer realm="http://127.0.0.1:{port}/token",service="registry.test"'
            self._send(401, b'{"errors": []}', {"WWW-Authenticate": challenge}, head)
            return
        if url.path == "/v2/ai/smollm2/manifests/135M-Q4_1":
            manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "config": {"mediaType": "application/vnd.docker.ai.model.config.v0.1+json",
                                   "digest": "sha256:" + "0" * 64, "size": 2},
                        "layers": [{"mediaType": "application/vnd.docker.ai.license", "digest": "sha256:" + "1" * 64,
                                    "size": 10},
                                   {"mediaType": "application/vnd.docker.ai.gguf.v3", "digest": DIGEST.upper().replace(
                                       "SHA256:", "sha256:"), "size": len(MODEL)}]}
            self._send(200, json.dumps(manifest).encode(), {"Content-Type": str(manifest["mediaType"])}, head)
        elif url.path == f"/v2/ai/smollm2/blobs/{DIGEST}":
            self._send(200, self.server.blob, {"ETag": f'"{DIGEST}"', "Accept-Ranges": "none"}, head)
        else:
            self._send(404, b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}', head=head)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)


@pytest.fixture
def registry() -> Iterator[Registry]:
    server = Registry(("127.0.0.1", 0), Handler)
    server.seen, server.blob, server.token_queries = [], MODEL, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def args_for(registry: Registry, cache: Path, repo: str = "smollm2:135M-Q4_1") -> list[str]:
    return ["-dr", repo, "--docker-registry", f"http://127.0.0.1:{registry.server_address[1]}",
            "--model-cache-dir", str(cache), "-np", "1", "-c", "1024"]


def test_a_docker_repo_model_is_pulled_with_a_token_then_served_then_reused(registry: Registry,
                                                                            tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    server = start(tmp_path, args_for(registry, cache))
    try:
        assert registry.token_queries == [{"service": "registry.test", "scope": "repository:ai/smollm2:pull"}]
        assert f"GET /v2/ai/smollm2/blobs/{DIGEST}" in registry.seen
        assert (cache / "docker" / "ai_smollm2_135M-Q4_1.gguf").read_bytes() == MODEL
        reply = requests.post(server.url("/v1/chat/completions"), timeout=60, json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        assert reply.status_code == 200, reply.text[:300]
    finally:
        assert server.stop() == 0, server.log()
    registry.seen.clear()
    again = start(tmp_path, args_for(registry, cache))  # the same blob (its ETag): the cached file
    try:
        assert f"GET /v2/ai/smollm2/blobs/{DIGEST}" not in registry.seen
        assert "using the cached copy" in again.log()
    finally:
        assert again.stop() == 0, again.log()
    registry.seen.clear()
    offline = start(tmp_path, [*args_for(registry, cache), "--offline"])
    try:
        assert requests.get(offline.url("/health"), timeout=10).status_code == 200
        assert registry.seen == []  # the registry is not asked at all
    finally:
        assert offline.stop() == 0, offline.log()


def test_a_blob_that_is_not_the_manifests_digest_is_refused(registry: Registry, tmp_path: Path) -> None:
    registry.blob = MODEL[:-1] + b"\0"
    refused = launch(tmp_path, args_for(registry, tmp_path / "cache"))
    assert refused.process.wait(120) == 4
    assert "ai/smollm2:135M-Q4_1" in refused.log() and "SHA-256 is not" in refused.log()
    assert not (tmp_path / "cache" / "docker" / "ai_smollm2_135M-Q4_1.gguf").exists()


def test_an_unknown_tag_stops_the_start_naming_it(registry: Registry, tmp_path: Path) -> None:
    refused = launch(tmp_path, args_for(registry, tmp_path / "cache", "smollm2:nope"))
    assert refused.process.wait(120) == 4
    assert "ai/smollm2:nope: the registry's manifest answered HTTP 404" in refused.log()
