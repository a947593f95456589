"""Models from an OCI registry (``-dr/--docker-repo``), as llama-server fetches Docker Hub's models:
``[REPO/]MODEL[:TAG]`` (repository ``ai/`` and tag ``latest`` by default) names an image whose manifest
has a GGUF layer (media type ``application/vnd.docker.ai.gguf.v3``, or any that names gguf); that
layer's blob is the model. The registry is Docker Hub's unless ``--docker-registry`` names another.

A registry that wants a token says so in its 401 (``WWW-Authenticate: Bearer realm=...,service=...``),
as the distribution spec's token authentication has it: the token is asked of that realm for pulling
the repository (anonymously), and the request made again with it. Docker Hub's realm is the one
llama-server asks directly. The blob is downloaded as ``--model-url`` downloads (``app/model_sources/
urls.py``: resumed, reused while its ETag holds) and checked against the manifest's SHA-256 digest,
into ``--model-cache-dir``/docker as ``REPO_TAG.gguf`` (llama-server's name for it)."""

from __future__ import annotations

import logging
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from app.model_sources.urls import TIMEOUT, UrlDownloadError, fetch_url

log = logging.getLogger(__name__)

DOCKER_SCHEME = "docker://"  # how a model source names a --docker-repo model until the worker has fetched it
DOCKER_HUB = "https://registry-1.docker.io"
GGUF_LAYER = "application/vnd.docker.ai.gguf.v3"
MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json,application/vnd.oci.image.manifest.v1+json"
_DIGEST = re.compile(r"^sha256:([0-9a-fA-F]{64})$")
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


class DockerModelError(Exception):
    """The model cannot be had from the registry; the message names the repository and says why."""


@dataclass(frozen=True)
class DockerRef:
    repo: str
    tag: str

    @classmethod
    def parse(cls, spec: str) -> DockerRef:
        """llama-server's form: the tag after the first colon (default ``latest``), and ``ai/`` before a
        repository that names no namespace."""
        repo, _, tag = spec.partition(":")
        if not repo or (":" in spec and not tag):
            raise DockerModelError(f"--docker-repo {spec!r}: expected [REPO/]MODEL[:TAG], e.g. ai/smollm2:135M-Q4_0")
        return cls(repo if "/" in spec else f"ai/{repo}", tag or "latest")

    @property
    def file_name(self) -> str:
        return f"{self.repo.replace('/', '_')}_{self.tag}.gguf"


def docker_source(spec: str) -> str:
    return DOCKER_SCHEME + spec


def is_docker_source(source: str) -> bool:
    return source.startswith(DOCKER_SCHEME)


def _token(http: requests.Session, challenge: str, repo: str) -> str:
    """A pull token from the realm a registry's ``WWW-Authenticate: Bearer ...`` names."""
    scheme, _, params = challenge.partition(" ")
    fields = dict(_CHALLENGE_PARAM.findall(params))
    if scheme.lower() != "bearer" or "realm" not in fields:
        raise DockerModelError(f"{repo}: the registry asks for authentication this server cannot give ({challenge})")
    query = {"service": fields.get("service", ""), "scope": fields.get("scope", f"repository:{repo}:pull")}
    reply = http.get(fields["realm"], params={k: v for k, v in query.items() if v}, timeout=TIMEOUT)
    if reply.status_code != 200:
        raise DockerModelError(f"{repo}: the registry's token service answered HTTP {reply.status_code}")
    body = reply.json()
    token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
    if not isinstance(token, str):
        raise DockerModelError(f"{repo}: the registry's token service sent no token")
    return token


def _manifest(http: requests.Session, registry: str, ref: DockerRef) -> dict[str, Any]:
    url = f"{registry}/v2/{ref.repo}/manifests/{urllib.parse.quote(ref.tag)}"
    reply = http.get(url, headers={"Accept": MANIFEST_TYPES}, timeout=TIMEOUT)
    if reply.status_code == 401 and "WWW-Authenticate" in reply.headers:
        http.headers["Authorization"] = f"Bearer {_token(http, reply.headers['WWW-Authenticate'], ref.repo)}"
        reply = http.get(url, headers={"Accept": MANIFEST_TYPES}, timeout=TIMEOUT)
    if reply.status_code != 200:
        raise DockerModelError(f"{ref.repo}:{ref.tag}: the registry's manifest answered HTTP {reply.status_code}")
    manifest = reply.json()
    if not isinstance(manifest, dict):
        raise DockerModelError(f"{ref.repo}:{ref.tag}: the manifest is not a JSON object")
    return manifest


def gguf_digest(manifest: dict[str, Any], ref: DockerRef) -> str:
    """The digest of the manifest's GGUF layer, checked to be a SHA-256 and lowered."""
    layers = manifest.get("layers")
    for layer in layers if isinstance(layers, list) else []:
        media_type = str(layer.get("mediaType", "")) if isinstance(layer, dict) else ""
        if media_type == GGUF_LAYER or "gguf" in media_type:
            match = _DIGEST.match(str(layer.get("digest", "")))
            if match is None:
                raise DockerModelError(f"{ref.repo}:{ref.tag}: the GGUF layer's digest is not a SHA-256 "
                                       f"({layer.get('digest')!r})")
            return f"sha256:{match.group(1).lower()}"
    raise DockerModelError(f"{ref.repo}:{ref.tag}: the manifest has no GGUF layer (is it a model image?)")


def fetch_docker_model(spec: str, registry: str, cache_dir: Path, offline: bool = False) -> Path:
    """The model's local copy: downloaded from the registry, or the cached one (``offline``: only that)."""
    ref = DockerRef.parse(spec)
    target = cache_dir / "docker" / ref.file_name
    if offline:
        if not target.exists():
            raise DockerModelError(f"{ref.repo}:{ref.tag}: --offline, and it is not in the cache ({target})")
        return target
    registry = registry.rstrip("/")
    log.info("%s:%s: the model from %s", ref.repo, ref.tag, registry)
    with requests.Session() as http:
        try:
            digest = gguf_digest(_manifest(http, registry, ref), ref)
            blob = f"{registry}/v2/{ref.repo}/blobs/{digest}#sha256={digest.removeprefix('sha256:')}"
            return fetch_url(blob, cache_dir, http, target=target)
        except requests.RequestException as exc:
            raise DockerModelError(f"{ref.repo}:{ref.tag}: {type(exc).__name__}: {exc}") from None
        except (UrlDownloadError, ValueError) as exc:
            raise DockerModelError(f"{ref.repo}:{ref.tag}: {exc}") from None
