"""Models from Cloud Storage: ``gs://bucket/model.gguf``, ``gs://bucket/dir/`` or ``AIP_STORAGE_URI``.

A directory must hold one ``.gguf`` model: a single file, or the parts of one split GGUF
(``name-00001-of-00003.gguf`` ...), of which the first part is loaded (llama.cpp finds the others
beside it). Downloads use google-cloud-storage's transfer manager (parallel ranged chunks, CRC32C
checked), land in a cache directory under the bucket and object name, and are reused on restart when
the size and the server's checksums (MD5 where it has one) still match. Progress goes to the log,
or to a progress bar on a terminal.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # google-cloud-storage is imported when a gs:// model is fetched: it takes 0.2 s at start-up
    from google.cloud import storage

log = logging.getLogger(__name__)

CHUNK_BYTES = 32 * 1024 * 1024
WORKERS = 8
SPLIT = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$")


class ModelDownloadError(Exception):
    """The model cannot be fetched from Cloud Storage; the message names the URI."""


@dataclass(frozen=True)
class GcsUri:
    bucket: str
    name: str

    @classmethod
    def parse(cls, uri: str) -> GcsUri:
        if not uri.startswith("gs://"):
            raise ModelDownloadError(f"not a gs:// URI: {uri}")
        bucket, _, name = uri[len("gs://"):].partition("/")
        if not bucket:
            raise ModelDownloadError(f"no bucket in {uri}")
        return cls(bucket, name)

    def __str__(self) -> str:
        return f"gs://{self.bucket}/{self.name}"


def is_gcs_uri(value: str | None) -> bool:
    return bool(value) and str(value).startswith("gs://")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vertex-llama" / "models"


def model_blobs(client: storage.Client, uri: GcsUri) -> list[Any]:
    """The blobs to download, the one llama.cpp loads first. Only object reads and lists: no bucket
    metadata call, so ``roles/storage.objectViewer`` is enough."""
    bucket = client.bucket(uri.bucket)
    if uri.name.endswith(".gguf"):
        blob = bucket.get_blob(uri.name)
        if blob is None:
            _list(client, uri, uri.name)  # a missing bucket says so here
            raise ModelDownloadError(f"{uri}: no such object")
        match = SPLIT.match(uri.name)
        if not match:
            return [blob]
        directory = uri.name.rsplit("/", 1)[0] + "/" if "/" in uri.name else ""
        return _split_parts(client, uri, directory, match["stem"], int(match["total"]))
    prefix = uri.name if not uri.name or uri.name.endswith("/") else uri.name + "/"
    names = [b.name for b in _list(client, uri, prefix)
             if b.name.endswith(".gguf") and "/" not in b.name[len(prefix):] and "mmproj" not in b.name]
    whole = [name for name in names if not SPLIT.match(name)]
    splits = sorted({(m["stem"], int(m["total"])) for name in names if (m := SPLIT.match(name))})
    candidates = [*whole, *(f"{stem}-00001-of-{total:05d}.gguf" for stem, total in splits)]
    if not candidates:
        raise ModelDownloadError(f"{uri}: no .gguf file in this directory")
    if len(candidates) > 1:
        listed = ", ".join(f"gs://{uri.bucket}/{name}" for name in candidates)
        raise ModelDownloadError(f"{uri}: several .gguf models ({listed}); give --model the one to serve")
    if whole:
        return [bucket.get_blob(whole[0])]
    stem, total = splits[0]
    return _split_parts(client, uri, prefix, stem, total)


def _list(client: storage.Client, uri: GcsUri, prefix: str) -> list[Any]:
    """The objects under ``prefix`` (an object list: what an object viewer may do)."""
    from google.api_core import exceptions as gexc

    try:
        return list(client.list_blobs(uri.bucket, prefix=prefix))
    except gexc.NotFound:
        raise ModelDownloadError(f"{uri}: the bucket {uri.bucket!r} does not exist") from None


def _split_parts(client: storage.Client, uri: GcsUri, directory: str, stem: str, total: int) -> list[Any]:
    bucket = client.bucket(uri.bucket)
    parts = []
    for number in range(1, total + 1):
        name = f"{stem}-{number:05d}-of-{total:05d}.gguf"
        blob = bucket.get_blob(name)
        if blob is None:
            raise ModelDownloadError(f"{uri}: part {number} of {total} is missing (gs://{uri.bucket}/{name})")
        parts.append(blob)
    return parts


def _md5_matches(path: Path, expected: str | None) -> bool:
    if not expected:
        return True
    digest = hashlib.md5(usedforsecurity=False)  # Cloud Storage's integrity hash
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return base64.b64encode(digest.digest()).decode() == expected


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + ".gcs.json")


def _identity(blob: Any) -> dict[str, Any]:
    """What names one version of an object: its generation, size and checksum."""
    return {"generation": blob.generation, "size": blob.size, "md5": blob.md5_hash}


def _cached(path: Path, blob: Any) -> bool:
    """The cached copy is this version of the object. A copy downloaded here carries a record of
    the object's identity, compared without reading the file (a model may be many GB); a copy
    without one is hashed once and then recorded."""
    if not path.is_file() or path.stat().st_size != blob.size:
        return False
    try:
        if json.loads(_record_path(path).read_text()) == _identity(blob):
            return True
    except (OSError, ValueError):
        pass
    if not _md5_matches(path, blob.md5_hash):
        return False
    _record_path(path).write_text(json.dumps(_identity(blob)))
    return True


@contextmanager
def _progress(path: Path, total: int, label: str) -> Iterator[None]:
    """Report the bytes landed in a (sparse) file while it downloads."""
    done = threading.Event()
    bar: Any = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=total, unit="B", unit_scale=True, desc=label)

    def report() -> None:
        shown = 0
        while not done.wait(0.5 if bar is not None else 5.0):
            try:
                landed = min(total, path.stat().st_blocks * 512)
            except FileNotFoundError:
                continue
            if bar is not None:
                bar.update(landed - shown)
                shown = landed
            else:
                log.info("downloading %s: %d%% (%d of %d MB)", label, 100 * landed // max(1, total),
                         landed >> 20, total >> 20)

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        if bar is not None:
            bar.update(total - bar.n)
            bar.close()


def _download(blob: Any, target: Path) -> None:
    label = f"gs://{blob.bucket.name}/{blob.name}"
    if _cached(target, blob):
        log.info("using the cached copy of %s (%s)", label, target)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    started = time.monotonic()
    log.info("downloading %s (%d MB) to %s", label, blob.size >> 20, target)
    from google.cloud.storage import transfer_manager

    with _progress(partial, blob.size, label):
        transfer_manager.download_chunks_concurrently(
            blob, str(partial), chunk_size=CHUNK_BYTES, worker_type=transfer_manager.THREAD, max_workers=WORKERS,
        )
    if partial.stat().st_size != blob.size or not _md5_matches(partial, blob.md5_hash):
        partial.unlink(missing_ok=True)
        raise ModelDownloadError(f"{label}: the downloaded copy does not match the object's size or checksum")
    partial.replace(target)
    _record_path(target).write_text(json.dumps(_identity(blob)))
    log.info("downloaded %s in %.1f s", label, time.monotonic() - started)


def _account(client: Any) -> str | None:
    """The service account the client acts as, where its credentials say (on Vertex AI they do)."""
    email = getattr(getattr(client, "_credentials", None), "service_account_email", None)
    return email if isinstance(email, str) and "@" in email else None


def find_projector(uri: str, client: storage.Client | None = None) -> str | None:
    """The ``mmproj*.gguf`` in the model's directory (``uri`` is the directory or a file in it), as a
    gs:// URI; None when there is none. Several are an error: ``--mmproj`` must choose."""
    parsed = GcsUri.parse(uri)
    if parsed.name.endswith(".gguf"):
        directory = parsed.name.rsplit("/", 1)[0] + "/" if "/" in parsed.name else ""
    else:
        directory = parsed.name if not parsed.name or parsed.name.endswith("/") else parsed.name + "/"
    made_here = client is None
    if client is None:
        from google.cloud import storage

        client = storage.Client()
    try:
        names = [blob.name for blob in _list(client, parsed, directory)
                 if "/" not in blob.name[len(directory):] and blob.name[len(directory):].startswith("mmproj")
                 and blob.name.endswith(".gguf")]
    finally:
        if made_here:
            client.close()
    if len(names) > 1:
        listed = ", ".join(f"gs://{parsed.bucket}/{name}" for name in names)
        raise ModelDownloadError(f"{uri}: several multimodal projectors ({listed}); give --mmproj the one to use "
                                 "(or --no-mmproj)")
    return f"gs://{parsed.bucket}/{names[0]}" if names else None


def fetch_model(uri: str, cache_dir: Path | None = None, client: storage.Client | None = None) -> Path:
    """Download (or reuse) the model at ``uri``; the local path of the file to load."""
    from google.api_core import exceptions as gexc

    parsed = GcsUri.parse(uri)
    cache = cache_dir or default_cache_dir()
    made_here = client is None
    try:
        if client is None:
            from google.cloud import storage

            client = storage.Client()
        blobs = model_blobs(client, parsed)
        paths = []
        for blob in blobs:
            target = cache / parsed.bucket / blob.name
            _download(blob, target)
            paths.append(target)
    except ModelDownloadError:
        raise
    except gexc.Forbidden as exc:
        account = _account(client)
        raise ModelDownloadError(
            f"{uri}: permission denied ({exc.message}); grant {account or 'the serving account'} "
            f"roles/storage.objectViewer on gs://{parsed.bucket}"
        ) from None
    except gexc.NotFound as exc:
        raise ModelDownloadError(f"{uri}: not found ({exc.message})") from None
    except gexc.GoogleAPIError as exc:
        raise ModelDownloadError(f"{uri}: {exc}") from None
    except Exception as exc:  # credentials, network, disk: still a start-up error naming the URI
        raise ModelDownloadError(f"{uri}: {type(exc).__name__}: {exc}") from None
    finally:
        if made_here and client is not None:
            client.close()
    first: Path = paths[0]
    return first


def list_objects(uri: GcsUri, prefix: str) -> list[str]:
    """The names of the objects under ``prefix`` in ``uri``'s bucket (the router's --models-dir scan)."""
    from google.api_core import exceptions as gexc
    from google.cloud import storage

    client = storage.Client()
    try:
        return [blob.name for blob in _list(client, uri, prefix)]
    except gexc.GoogleAPIError as exc:
        raise ModelDownloadError(f"{uri}: {exc}") from None
    except ModelDownloadError:
        raise
    except Exception as exc:  # credentials, network
        raise ModelDownloadError(f"{uri}: {type(exc).__name__}: {exc}") from None
    finally:
        client.close()
