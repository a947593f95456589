"""A stand-in for the Hugging Face Hub's HTTP API on 127.0.0.1 (``HF_ENDPOINT`` points
huggingface_hub at it): a repository's file listing and file downloads, from a dict of
repositories, each a dict of file paths to local files. It records the requests it answered."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubStandIn:
    def __init__(self, repos: dict[str, dict[str, Path]], token: str | None = None) -> None:
        self.repos = repos
        self.token = token  # when set, requests must carry it
        self.requests: list[str] = []

    def _etag(self, path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _deny(self) -> bool:
                if hub.token and self.headers.get("Authorization") != f"Bearer {hub.token}":
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return True
                return False

            def _answer(self, body: bytes) -> None:
                hub.requests.append(f"{self.command} {self.path}")
                if self._deny():
                    return
                path = unquote(urlsplit(self.path).path)
                if path.startswith("/api/models/") and "/tree/" in path:
                    repo = path.removeprefix("/api/models/").split("/tree/")[0]
                    if repo not in hub.repos:
                        return self._missing()
                    listing = [{"type": "file", "path": name, "size": file.stat().st_size, "oid": hub._etag(file)[:40]}
                               for name, file in sorted(hub.repos[repo].items())]
                    return self._send(200, json.dumps(listing).encode(), "application/json")
                if "/resolve/" in path:
                    repo, _, rest = path.lstrip("/").partition("/resolve/")
                    name = rest.partition("/")[2]
                    file = hub.repos.get(repo, {}).get(name)
                    if file is None:
                        return self._missing()
                    data = file.read_bytes()
                    return self._send(200, data, "application/octet-stream", {
                        "ETag": f'"{hub._etag(file)}"', "X-Repo-Commit": COMMIT}, head=self.command == "HEAD")
                return self._missing()

            def _missing(self) -> None:
                self._send(404, b'{"error": "not found"}', "application/json", {"X-Error-Code": "EntryNotFound"})

            def _send(self, status: int, body: bytes, kind: str, headers: dict[str, str] | None = None,
                      head: bool = False) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer(b"")

            def do_HEAD(self) -> None:
                self._answer(b"")

        return Handler


@contextmanager
def hub_standin(repos: dict[str, dict[str, Path]], token: str | None = None) -> Iterator[tuple[str, HubStandIn]]:
    """(its URL, the stand-in) while it serves."""
    hub = HubStandIn(repos, token)
    server = ThreadingHTTPServer(("127.0.0.1", 0), hub.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", hub
    finally:
        server.shutdown()
        server.server_close()
