"""Models from plain URLs (``--model-url``, ``--mmproj-url``), as llama-server fetches them: into the
cache (``--model-cache-dir``/urls), through a ``.part`` file that a later start resumes with a Range
request, reused while the server's ETag is the one saved beside it, and checked before it is used: its
length against Content-Length, its SHA-256 against a ``#sha256=HEX`` fragment of the URL, or against
the ETag where that is a SHA-256 (as the Hugging Face Hub sends for its files), and GGUF's magic."""

from __future__ import annotations

import hashlib
import logging
import re
import urllib.parse
from pathlib import Path

import requests

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
TIMEOUT = (10.0, 60.0)  # connect, then between reads
HEX_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class UrlDownloadError(Exception):
    """The file cannot be fetched or is not what the URL promised; the message names the URL."""


def is_url_source(value: str | None) -> bool:
    return bool(value) and str(value).startswith(("http://", "https://"))


def _target(url: str, cache_dir: Path) -> Path:
    bare = url.split("#", 1)[0]
    name = Path(urllib.parse.urlsplit(bare).path).name or "model.gguf"
    return cache_dir / "urls" / hashlib.sha256(bare.encode()).hexdigest()[:16] / name


def _expected_sha256(url: str, etag: str) -> str | None:
    fragment = urllib.parse.urlsplit(url).fragment
    given = dict(urllib.parse.parse_qsl(fragment)).get("sha256", "").lower()
    if given:
        return given
    bare = etag.strip('"').lower().removeprefix("w/").strip('"')
    return bare if HEX_SHA256.match(bare) else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def fetch_url(url: str, cache_dir: Path, session: requests.Session | None = None, target: Path | None = None
              ) -> Path:
    """The local copy of ``url`` (downloaded, resumed or reused; at ``target``, else a path in the cache
    made from the URL); UrlDownloadError naming the URL."""
    target = target or _target(url, cache_dir)
    bare = url.split("#", 1)[0]
    http = session or requests.Session()
    try:
        head = http.head(bare, allow_redirects=True, timeout=TIMEOUT)
        if head.status_code >= 400:
            raise UrlDownloadError(f"{bare}: HTTP {head.status_code}")
        etag = head.headers.get("ETag", "")
        etag_file = target.with_name(target.name + ".etag")
        if target.exists() and (not etag or (etag_file.exists() and etag_file.read_text() == etag)):
            log.info("%s: using the cached copy %s", bare, target)
            return target
        _download(http, bare, target, head.headers.get("Accept-Ranges", "") == "bytes")
    except requests.RequestException as exc:
        raise UrlDownloadError(f"{bare}: {type(exc).__name__}: {exc}") from None
    expected = _expected_sha256(url, etag)
    if expected is not None and _sha256(target) != expected:
        target.unlink()
        raise UrlDownloadError(f"{bare}: the file's SHA-256 is not {expected}: removed (download it again)")
    with target.open("rb") as handle:
        if handle.read(4) != b"GGUF":
            target.unlink()
            raise UrlDownloadError(f"{bare}: not a GGUF file")
    if etag:
        etag_file.write_text(etag)
    return target


def _download(http: requests.Session, url: str, target: Path, ranges: bool) -> None:
    """Into ``target``'s ``.part`` file, from where an earlier start left it when the server takes ranges."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.exists() and ranges else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with http.get(url, headers=headers, stream=True, timeout=TIMEOUT) as reply:
        if reply.status_code >= 400:
            raise UrlDownloadError(f"{url}: HTTP {reply.status_code}")
        if have and reply.status_code != 206:
            have = 0  # the server sent the whole file: start again
        length = reply.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        log.info("%s: downloading into %s%s", url, target, f" (resuming at {have} bytes)" if have else "")
        with part.open("ab" if have else "wb") as out:
            try:
                for block in reply.iter_content(CHUNK_BYTES):
                    out.write(block)
            except requests.RequestException:
                pass  # the connection broke: what came is kept for the next start
    size = part.stat().st_size
    if total is not None and size != total:
        raise UrlDownloadError(f"{url}: the download ended at {size} of {total} bytes (start again to resume)")
    part.replace(target)
