"""Where a media item's bytes come from: data: URIs, raw base64, http(s) only with --media-urls
(within --media-max-bytes), file:// only under --media-path. Served by a local HTTP server."""

from __future__ import annotations

import base64
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from app.config.settings import parse_settings
from app.handlers.context import ServerContext
from app.handlers.media import media_from_url
from app.protocol.errors import InvalidRequestError

PAYLOAD = b"\x89PNG fake image bytes" * 10


def context(*args: str) -> ServerContext:
    return cast(ServerContext, SimpleNamespace(settings=parse_settings(list(args), {})))


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/cat.png" else 404)
            self.end_headers()
            if self.path == "/cat.png":
                self.wfile.write(PAYLOAD)

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
        media_from_url(context(), f"{http_url}/cat.png", "f")
    assert media_from_url(context("--media-urls"), f"{http_url}/cat.png", "f").data == PAYLOAD
    with pytest.raises(InvalidRequestError, match="could not be fetched"):
        media_from_url(context("--media-urls"), f"{http_url}/missing.png", "f")


def test_the_size_limit_holds_for_urls_and_inline_data(http_url: str) -> None:
    small = ("--media-urls", "--media-max-bytes", "64")
    with pytest.raises(InvalidRequestError, match="more than --media-max-bytes"):
        media_from_url(context(*small), f"{http_url}/cat.png", "f")
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
