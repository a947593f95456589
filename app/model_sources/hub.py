"""Models from the Hugging Face Hub, as llama-server takes them: ``-hf USER/REPO[:QUANT]`` picks the
GGUF file (``-hff`` names it), its other split parts and a multimodal projector beside it, and
downloads them through huggingface_hub into the model cache (``HF_ENDPOINT``, ``HF_TOKEN`` and
``--offline`` as huggingface_hub reads them).

The choice of files follows the pinned llama.cpp's ``common/download.cpp``: the file whose name
holds the tag (default ``Q4_K_M``, then ``Q8_0``, then the first model file), the first part of a
split model and all its parts, and the ``mmproj`` file in the same folder closest in quantization.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_SIDECARS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")


class HubError(ValueError):
    """The repository or file cannot be used; the message says why (and lists the GGUF files)."""


@dataclass(frozen=True)
class SplitInfo:
    prefix: str
    tag: str
    index: int
    count: int


@dataclass(frozen=True)
class HubPlan:
    model_files: tuple[str, ...]  # the model, every split part, the first part first
    mmproj: str | None


@dataclass(frozen=True)
class HubModel:
    model: Path  # the first (or only) part
    mmproj: Path | None


HUB_SCHEME = "hf://"  # how a model source names an --hf-repo model until the worker has fetched it


def hub_source(spec: str) -> str:
    return HUB_SCHEME + spec


def is_hub_source(source: str) -> bool:
    return source.startswith(HUB_SCHEME)


def split_repo_tag(spec: str) -> tuple[str, str]:
    """``USER/REPO[:TAG]`` as (repo, tag); a HubError for any other form."""
    repo, _, tag = spec.partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise HubError(f"--hf-repo {spec!r}: expected <user>/<model>[:quant]")
    return repo, tag.rpartition(":")[2] if tag else ""


def split_info(path: str) -> SplitInfo | None:
    if not path.lower().endswith(".gguf"):
        return None
    prefix, index, count = path[: -len(".gguf")], 1, 1
    if (match := _SPLIT.match(prefix)) is not None:
        prefix, index, count = match[1], int(match[2]), int(match[3])
    tag = match[1].upper() if (match := _TAG.search(prefix)) is not None else ""
    return SplitInfo(prefix, tag, index, count)


def _quant_bits(tag: str) -> int:
    digits = re.search(r"[0-9]+", tag)
    return int(digits[0]) if digits else 0


def is_model_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.lower().endswith(".gguf") and not any(marker in name for marker in _SIDECARS)


def _first_part(path: str) -> bool:
    info = split_info(path)
    return info is not None and (info.count <= 1 or info.index == 1)


def best_model(files: list[str], tag: str) -> str | None:
    for wanted in (tag,) if tag else DEFAULT_TAGS:
        pattern = re.compile(re.escape(wanted) + r"[.-]", re.IGNORECASE)
        for path in files:
            if is_model_file(path) and pattern.search(path) and _first_part(path):
                return path
    if not tag:
        return next((path for path in files if is_model_file(path) and _first_part(path)), None)
    return None


def split_parts(files: list[str], primary: str) -> tuple[str, ...]:
    info = split_info(primary)
    if info is None or info.count <= 1:
        return (primary,)
    parts = [(other.index, path) for path in files
             if (other := split_info(path)) is not None and other.count == info.count and other.prefix == info.prefix]
    return tuple(path for _, path in sorted(parts))


def best_mmproj(files: list[str], model: str) -> str | None:
    """The projector beside ``model``: the deepest shared folder, then the closest quantization."""
    model_dir = model.split("/")[:-1]
    model_info = split_info(model)
    model_bits = _quant_bits(model_info.tag) if model_info else 0
    best: tuple[int, int, str] | None = None  # (-depth, bits difference, path)
    for path in files:
        if not path.lower().endswith(".gguf") or "mmproj" not in path:
            continue
        folder = path.split("/")[:-1]
        if folder != model_dir[: len(folder)]:
            continue
        info = split_info(path)
        key = (-len(folder), abs((_quant_bits(info.tag) if info else 0) - model_bits), path)
        if best is None or key[:2] < best[:2]:
            best = key
    return best[2] if best else None


def plan_files(files: list[str], tag: str, hf_file: str | None, with_mmproj: bool) -> HubPlan:
    if hf_file and hf_file not in files:
        raise HubError(f"--hf-file {hf_file!r} is not in the repository{_listing(files)}")
    primary = hf_file or best_model(files, tag)
    if primary is None:
        wanted = f"GGUF file tagged {tag}" if tag else "GGUF model file"
        raise HubError(f"the repository has no {wanted}{_listing(files)}")
    return HubPlan(split_parts(files, primary), best_mmproj(files, primary) if with_mmproj else None)


def _listing(files: list[str]) -> str:
    ggufs = [path for path in files if path.lower().endswith(".gguf")]
    return f" (its GGUF files: {', '.join(ggufs)})" if ggufs else " (it has no GGUF files)"


def fetch_hub_model(spec: str, hf_file: str | None, token: str | None, cache_dir: Path, with_mmproj: bool,
                    offline: bool = False) -> HubModel:
    """Download (or find in the cache) what ``-hf`` names; a HubError says what went wrong."""
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    repo, tag = split_repo_tag(spec)
    cache = cache_dir / "huggingface"
    try:
        if offline:
            snapshot = Path(snapshot_download(repo, cache_dir=cache, local_files_only=True))
            files = sorted(str(path.relative_to(snapshot)) for path in snapshot.rglob("*") if path.is_file())
        else:
            files = HfApi(token=token or None).list_repo_files(repo)
        plan = plan_files(files, tag, hf_file, with_mmproj)
        wanted = [*plan.model_files, *([plan.mmproj] if plan.mmproj else [])]
        paths = {name: Path(hf_hub_download(repo, name, cache_dir=cache, token=token or None,
                                            local_files_only=offline)) for name in wanted}
    except LocalEntryNotFoundError:
        raise HubError(f"--offline: {spec} is not in the cache ({cache})") from None
    except HfHubHTTPError as exc:
        raise HubError(f"the Hugging Face Hub answered: {exc}") from None
    log.info("%s: %s%s", spec, ", ".join(plan.model_files), f" and the projector {plan.mmproj}" if plan.mmproj else "")
    return HubModel(paths[plan.model_files[0]], paths[plan.mmproj] if plan.mmproj else None)


def cached_models(cache_dir: Path) -> list[str]:
    """The models of the Hugging Face cache under ``cache_dir`` (``-hf`` downloads), as ``USER/REPO:FILE``,
    one per model file (the first part of a split GGUF); --cache-list prints them."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir / "huggingface")
    except CacheNotFound:
        return []
    found = set()
    for repo in info.repos:
        for revision in repo.revisions:
            for file in revision.files:
                if is_model_file(file.file_name) and _first_part(file.file_name):
                    found.add(f"{repo.repo_id}:{file.file_name}")
    return sorted(found)
