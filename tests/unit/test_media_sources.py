"""Where a media item's bytes come from: data: URIs, raw base64, http(s) only with --media-urls
(public addresses unless --media-urls-private, redirects checked, within --media-max-bytes and a
total time), file:// only under --media-path. Served by a local HTTP server."""

from __future__ import annotations

import base64
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from app.config.settings import parse_settings
from app.handlers.context import ServerContext
from app.handlers.media import media_from_url
from app.handlers.request_limits import MAX_MEDIA_ITEMS
from app.handlers.url_fetch import FetchPolicy, FetchRefused, fetch, private_address, public_address
from app.protocol.errors import InvalidRequestError
from tests.inprocess import make_application

PAYLOAD = b"\x89PNG fake image bytes" * 10
REDIRECTS = {"/moved": "/cat.png", "/to-metadata": "http://169.254.169.254/computeMetadata/v1/",
             "/to-ftp": "ftp://127.0.0.1/cat.png", "/loop": "/loop"}
PRIVATE = ("--media-urls", "--media-urls-private")
HITS = [0]  # requests the local HTTP server has answered


def read(ctx: ServerContext, url: str) -> bytes:
    """A URL's item, read (an http(s) one is fetched only then)."""
    return media_from_url(ctx, url, "f").data


def context(*args: str) -> ServerContext:
    return cast(ServerContext, SimpleNamespace(settings=parse_settings(list(args), {})))


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            HITS[0] += 1
            if self.path in REDIRECTS:
                self.send_response(302)
                self.send_header("Location", REDIRECTS[self.path])
                self.end_headers()
                return
            self.send_response(200 if self.path in ("/cat.png", "/drip") else 404)
            self.end_headers()
            if self.path == "/cat.png":
                self.wfile.write(PAYLOAD)
            elif self.path == "/drip":  # a byte a second, for a minute
                for _ in range(60):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(1)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_data_uris_and_raw_base64() -> None:
    encoded = base64.b64encode(PAYLOAD).decode()
    assert media_from_url(context(), f"data:image/png;base64,{encoded}", "f").data == PAYLOAD
    assert media_from_url(context(), encoded, "f").data == PAYLOAD
    with pytest.raises(InvalidRequestError, match="Field 'f': a data: URI must be base64"):
        media_from_url(context(), "data:image/png,raw", "f")


def test_http_urls_are_fetched_only_when_allowed(http_url: str) -> None:
    with pytest.raises(InvalidRequestError, match="--media-urls"):
        read(context(), f"{http_url}/cat.png")
    with pytest.raises(InvalidRequestError, match="not an allowed address"):  # 127.0.0.1 is not public
        read(context("--media-urls"), f"{http_url}/cat.png")
    assert media_from_url(context(*PRIVATE), f"{http_url}/cat.png", "f").data == PAYLOAD
    assert media_from_url(context(*PRIVATE), f"{http_url}/moved", "f").data == PAYLOAD  # a redirect, checked
    with pytest.raises(InvalidRequestError, match="could not be fetched") as missing:
        read(context(*PRIVATE), f"{http_url}/missing.png")
    assert "404" not in str(missing.value) and "127.0.0.1" not in str(missing.value)  # nothing to scan with


@pytest.mark.parametrize("target", ["http://169.254.169.254/computeMetadata/v1/", "http://[::ffff:169.254.169.254]/",
                                    "http://224.0.0.1/", "http://0.0.0.0/"])
def test_the_metadata_server_and_other_special_addresses_are_never_fetched(target: str) -> None:
    with pytest.raises(InvalidRequestError, match="not an allowed address"):
        read(context(*PRIVATE), target)


@pytest.mark.parametrize("path", ["/to-metadata", "/to-ftp", "/loop"])
def test_each_redirect_is_checked_and_redirects_are_few(http_url: str, path: str) -> None:
    with pytest.raises(InvalidRequestError, match="the media URL was not used"):
        read(context(*PRIVATE), f"{http_url}{path}")


def test_a_slow_drip_runs_out_of_time(http_url: str) -> None:
    """The fetch's time is bounded as a whole, not per read: one byte a second never ends it."""
    with pytest.raises(FetchRefused, match="could not be fetched"):
        fetch(f"{http_url}/drip", FetchPolicy(max_bytes=1024, timeout_seconds=1.5, allow_private=True))


def test_which_addresses_are_public_or_private() -> None:
    assert [public_address(a) for a in ("8.8.8.8", "2001:4860:4860::8888", "127.0.0.1", "10.1.2.3", "192.168.0.1",
                                        "169.254.169.254", "::ffff:127.0.0.1", "224.0.0.1", "::1", "fe80::1")] == [
        True, True, False, False, False, False, False, False, False, False]
    assert [private_address(a) for a in ("127.0.0.1", "10.1.2.3", "::1", "169.254.169.254", "fe80::1", "8.8.8.8")] == [
        True, True, True, False, False, False]


def test_the_size_limit_holds_for_urls_and_inline_data(http_url: str) -> None:
    small = (*PRIVATE, "--media-max-bytes", "64")
    with pytest.raises(InvalidRequestError, match="more than --media-max-bytes"):
        read(context(*small), f"{http_url}/cat.png")
    with pytest.raises(InvalidRequestError, match="larger than --media-max-bytes"):
        media_from_url(context(*small), base64.b64encode(PAYLOAD).decode(), "f")


def test_files_only_under_the_media_path(tmp_path: Path) -> None:
    (tmp_path / "inside").mkdir()
    (tmp_path / "inside" / "cat.png").write_bytes(PAYLOAD)
    (tmp_path / "secret.png").write_bytes(b"secret")
    allowed = context("--media-path", str(tmp_path / "inside"))
    assert media_from_url(allowed, "file://cat.png", "f").data == PAYLOAD
    assert media_from_url(allowed, f"file://{tmp_path}/inside/cat.png", "f").data == PAYLOAD
    for outside in ("file://../secret.png", f"file://{tmp_path}/secret.png"):
        with pytest.raises(InvalidRequestError, match="outside --media-path"):
            media_from_url(allowed, outside, "f")
    with pytest.raises(InvalidRequestError, match="--media-path DIR"):
        media_from_url(context(), "file://cat.png", "f")


def test_a_url_is_fetched_only_when_its_tokens_are_needed(http_url: str) -> None:
    """/apply-template renders markers and needs no bytes; a model without a projector takes no media:
    neither makes the server fetch anything."""
    hits_before = HITS[0]
    built = make_application("--media-urls", "--media-urls-private")
    try:
        client = built.flask.test_client()
        messages = [{"role": "user", "content": [{"type": "text", "text": "Look"},
                                                 {"type": "image_url", "image_url": {"url": f"{http_url}/cat.png"}}]}]
        assert client.post("/apply-template", json={"messages": messages}).status_code == 200
        refused = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
        assert refused.status_code == 400 and "no multimodal projector" in refused.get_json()["error"]["message"]
        assert HITS[0] == hits_before
    finally:
        built.shutdown()


def test_the_media_items_of_one_request_are_bounded() -> None:
    built = make_application()
    try:
        url = "data:image/png;base64," + base64.b64encode(PAYLOAD).decode()
        image = {"type": "image_url", "image_url": {"url": url}}
        many = [{"role": "user", "content": [image] * (MAX_MEDIA_ITEMS + 1)}]
        refused = built.flask.test_client().post("/apply-template", json={"messages": many})
        assert refused.status_code == 400
        assert f"Field 'messages': more than {MAX_MEDIA_ITEMS}" in refused.get_json()["error"]["message"]
    finally:
        built.shutdown()
