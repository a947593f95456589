"""The models a router knows: every model of ``--models-dir`` (a folder or a ``gs://`` prefix) and every
section of ``--models-preset``, with the options each child starts with."""

from __future__ import annotations

import configparser
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from app.config.options import TRUE, SettingsError
from app.router.arguments import RESERVED, dest_of, preset_argv

GLOBAL_SECTION = "*"
TOP = "__top__"  # keys before the first section (``version = 1``)
PRESET_ONLY = frozenset({"load-on-startup", "stop-timeout", "dedup-cache-models"})
DEFAULT_STOP_TIMEOUT = 10.0  # seconds, llama-server's
FIRST_SHARD = re.compile(r"-00001-of-\d{5}\.gguf$")
OTHER_SHARD = re.compile(r"-\d{5}-of-\d{5}\.gguf$")


class CatalogError(SettingsError):
    """A model source or a preset file that cannot be read; the message names it."""


@dataclass(frozen=True)
class ModelEntry:
    """One model the router can start: where its files are, its preset options (``[*]`` then its own
    section, the section's value winning), and the preset-only settings."""

    name: str
    source: str  # "models_dir" or "preset", as llama-server's /models says
    model_argv: tuple[str, ...]  # --model PATH [--mmproj PATH], or --hf-repo REPO ...
    options: tuple[tuple[str, str], ...] = ()
    load_on_startup: bool = False
    stop_timeout: float = DEFAULT_STOP_TIMEOUT
    preset_text: str | None = field(default=None, compare=False)

    def argv(self) -> list[str]:
        """The preset's options as flags (the router's own flags come after them and win)."""
        return preset_argv(dict(self.options))

    @property
    def path(self) -> str:
        words = list(self.model_argv)
        return words[words.index("--model") + 1] if "--model" in words else ""


def _folder_model(name: str, files: Iterable[str]) -> ModelEntry | None:
    """A subfolder's model: its first shard or its one model file, and its mmproj* projector."""
    model = projector = None
    for path in sorted(files):
        base = path.rsplit("/", 1)[-1]
        if not base.endswith(".gguf"):
            continue
        if base.startswith("mmproj"):
            projector = projector or path
        elif FIRST_SHARD.search(base) or not OTHER_SHARD.search(base):
            model = model or path
    if model is None:
        return None
    return ModelEntry(name, "models_dir", ("--model", model, *(("--mmproj", projector) if projector else ())))


def models_in(listing: Mapping[str, list[str]], top_files: Iterable[str]) -> dict[str, ModelEntry]:
    """The models of a folder: ``top_files`` are its own files (one model each), ``listing`` its
    subfolders' files (one model each)."""
    entries: dict[str, ModelEntry] = {}
    for path in sorted(top_files):
        base = path.rsplit("/", 1)[-1]
        if base.endswith(".gguf") and not base.startswith("mmproj") and (
                FIRST_SHARD.search(base) or not OTHER_SHARD.search(base)):
            name = base.removesuffix(".gguf")
            entries[name] = ModelEntry(name, "models_dir", ("--model", path))
    for folder, files in sorted(listing.items()):
        entry = _folder_model(folder, files)
        if entry is not None:
            entries[folder] = entry
    return entries


def scan_local(directory: str) -> dict[str, ModelEntry]:
    root = Path(directory)
    if not root.is_dir():
        raise CatalogError(f"--models-dir: {directory!r} does not exist or is not a directory")
    folders = {child.name: [str(f) for f in child.iterdir() if f.is_file()]
               for child in root.iterdir() if child.is_dir()}
    return models_in(folders, [str(f) for f in root.iterdir() if f.is_file()])


def scan_storage(uri: str) -> dict[str, ModelEntry]:
    """A ``gs://`` prefix's models, as ``gs://`` URIs: each child downloads its own into the cache."""
    from app.model_sources.gcs import GcsUri, ModelDownloadError, list_objects

    try:
        parsed = GcsUri.parse(uri)
        prefix = parsed.name if not parsed.name or parsed.name.endswith("/") else parsed.name + "/"
        names = list_objects(parsed, prefix)
    except ModelDownloadError as exc:
        raise CatalogError(f"--models-dir: {exc}") from None
    top: list[str] = []
    folders: dict[str, list[str]] = {}
    for name in names:
        rest = name[len(prefix):]
        full = f"gs://{parsed.bucket}/{name}"
        if "/" not in rest:
            top.append(full)
        elif rest.count("/") == 1:
            folders.setdefault(rest.split("/", 1)[0], []).append(full)
    return models_in(folders, top)


def scan_models_dir(directory: str) -> dict[str, ModelEntry]:
    return scan_storage(directory) if directory.startswith("gs://") else scan_local(directory)


def read_preset(path: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The INI file's ``[*]`` options and each model section's, keys and order as written."""
    parser = configparser.ConfigParser(interpolation=None, strict=False, delimiters=("=",),
                                       comment_prefixes=(";", "#"), inline_comment_prefixes=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # LLAMA_ARG_* names keep their case
    try:
        text = Path(path).read_text(encoding="utf-8")
        parser.read_string(f"[{TOP}]\n{text}", source=path)
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        raise CatalogError(f"--models-preset {path}: {exc}") from None
    sections = {name: dict(parser.items(name, raw=True)) for name in parser.sections() if name != TOP}
    return sections.pop(GLOBAL_SECTION, {}), sections


def _merged(global_options: Mapping[str, str], own: Mapping[str, str], where: str) -> dict[str, tuple[str, str]]:
    """The options of ``[*]`` and a section by the option they set (``c`` and ``ctx-size`` are one
    option), the section's winning; each key checked to name an option."""
    merged: dict[str, tuple[str, str]] = {}
    for section, options in (("[*]", global_options), (where, own)):
        for key, value in options.items():
            if key in PRESET_ONLY:
                merged[key] = (key, value)
                continue
            try:
                dest = dest_of(key)
            except SettingsError as exc:
                raise CatalogError(f"--models-preset {section}: {exc}") from None
            merged[dest or key] = (key, value)
    return merged


def _identity(merged: dict[str, tuple[str, str]], name: str, base: ModelEntry | None) -> tuple[str, ...]:
    given = {dest: value for dest, (_, value) in merged.items()
             if dest in ("model", "mmproj", "model_url", "mmproj_url", "hf_repo", "hf_file")}
    if "model_url" in given:
        return ("--model-url", given["model_url"], *(("--mmproj-url", given["mmproj_url"]) if "mmproj_url" in given
                                                     else ()))
    if "model" in given:
        return ("--model", given["model"], *(("--mmproj", given["mmproj"]) if "mmproj" in given else ()))
    if "hf_repo" in given:
        return ("--hf-repo", given["hf_repo"], *(("--hf-file", given["hf_file"]) if "hf_file" in given else ()))
    if base is not None:
        return base.model_argv + (("--mmproj", given["mmproj"]) if "mmproj" in given else ())
    raise CatalogError(f"--models-preset [{name}]: no such model in --models-dir, and no model or hf-repo key "
                       "to load it from")


def preset_entries(path: str, known: Mapping[str, ModelEntry]) -> dict[str, ModelEntry]:
    """The preset's models: a section named after a known model sets its options; any other section
    names its model with ``model`` (or ``hf-repo``). ``[*]`` applies to every model, known ones too."""
    global_options, sections = read_preset(path)
    _merged(global_options, {}, "[*]")  # checked even where no model takes it
    entries = {name: _entry(name, _merged(global_options, {}, f"[{name}]"), entry, "models_dir")
               for name, entry in known.items()}
    for name, own in sections.items():
        entries[name] = _entry(name, _merged(global_options, own, f"[{name}]"), known.get(name), "preset")
    return entries


def _entry(name: str, merged: dict[str, tuple[str, str]], base: ModelEntry | None, source: str) -> ModelEntry:
    options = tuple((key, value) for dest, (key, value) in merged.items()
                    if dest not in RESERVED and dest not in PRESET_ONLY)
    load_on_startup = merged.get("load-on-startup", ("", "false"))[1].strip().lower() in TRUE
    try:
        stop_timeout = float(merged.get("stop-timeout", ("", str(DEFAULT_STOP_TIMEOUT)))[1])
    except ValueError:
        raise CatalogError(f"--models-preset [{name}]: stop-timeout is not a number of seconds") from None
    entry = ModelEntry(name, source, _identity(merged, name, base), options, load_on_startup, stop_timeout,
                       "\n".join(f"{key} = {value}" for key, value in options) or None)
    try:
        entry.argv()
    except SettingsError as exc:
        raise CatalogError(f"--models-preset [{name}]: {exc}") from None
    return entry


def load_catalog(models_dir: str | None, models_preset: str | None) -> dict[str, ModelEntry]:
    """Every model the router can serve, by name (a preset section wins over a folder's model of the
    same name, whose files it keeps unless it names others)."""
    known = scan_models_dir(models_dir) if models_dir else {}
    return preset_entries(models_preset, known) if models_preset else known
