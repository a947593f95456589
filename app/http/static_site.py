"""Static files at ``/``: the web UI (or the directory of ``--path``).

The files are read once, when the app is built, and kept in memory with a gzip copy of each
compressible one. A client that accepts gzip gets the gzip copy (``Content-Encoding: gzip``); every
answer carries a strong ETag (one per encoding) and ``Cache-Control: no-cache``, so a browser keeps
its copy and revalidates it with a 304 instead of fetching it again. The pages are public and are
served while the model loads (the middleware lets these paths through), so the UI can say that it
loads. ``/`` is ``index.html``.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import mimetypes
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from flask import Response, request

log = logging.getLogger(__name__)

INDEX = "index.html"
CACHE_CONTROL = "no-cache"
_COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml",
                 "application/manifest+json")
# A module script is refused by browsers unless it is served as JavaScript.
_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".html": "text/html",
          ".json": "application/json", ".svg": "image/svg+xml", ".webmanifest": "application/manifest+json"}


@dataclass(frozen=True)
class StaticFile:
    content_type: str
    body: bytes
    gzipped: bytes | None  # None where compression does not pay (already compressed formats)
    etag: str


def content_type_of(path: Path) -> str:
    kind = _TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"{kind}; charset=utf-8" if kind.startswith("text/") or kind.endswith(("json", "javascript")) else kind


def read_static_file(path: Path) -> StaticFile:
    body = path.read_bytes()
    kind = content_type_of(path)
    packed = gzip.compress(body, compresslevel=9, mtime=0) if kind.startswith(_COMPRESSIBLE) else None
    if packed is not None and len(packed) >= len(body):
        packed = None
    return StaticFile(kind, body, packed, hashlib.sha256(body).hexdigest()[:20])


class StaticSite:
    """The files of one directory by URL path (``/``, ``/index.html``, ``/js/chat.js``)."""

    def __init__(self, files: Mapping[str, StaticFile]) -> None:
        self._files = dict(files)

    @classmethod
    def from_directory(cls, root: Path) -> StaticSite:
        """Every regular file below ``root`` (hidden ones and links that leave it excepted)."""
        root = root.resolve()
        files: dict[str, StaticFile] = {}
        for path in sorted(root.rglob("*")):
            relative = path.relative_to(root)
            if any(part.startswith(".") for part in relative.parts) or not path.is_file():
                continue
            if not path.resolve().is_relative_to(root):
                log.warning("static files: %s leads outside %s; not served", path, root)
                continue
            files["/" + relative.as_posix()] = read_static_file(path)
        if "/" + INDEX in files:
            files["/"] = files["/" + INDEX]
        log.info("static files: %d from %s (%d bytes gzip-compressed)", len(files), root,
                 sum(len(f.gzipped or f.body) for f in files.values()))
        return cls(files)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(self._files)

    def response(self, path: str) -> Response:
        """The file at ``path`` for the current request: gzip if accepted, 304 if the client's copy is current."""
        file = self._files[path]
        gzipped = file.gzipped is not None and request.accept_encodings["gzip"] > 0
        response = Response(file.gzipped if gzipped else file.body, content_type=file.content_type)
        if gzipped:
            response.headers["Content-Encoding"] = "gzip"
        if file.gzipped is not None:
            response.vary.add("Accept-Encoding")
        response.set_etag(file.etag + ("-gzip" if gzipped else ""))
        response.headers["Cache-Control"] = CACHE_CONTROL
        response.make_conditional(request)  # 304 and no body when the client's copy is current
        return response
