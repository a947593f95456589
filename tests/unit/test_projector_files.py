"""Which local projector file a start uses: --mmproj checked before the server starts, or the one
mmproj*.gguf in a model directory (--mmproj-auto); several, a missing file or a non-GGUF file are
start-up errors naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.model_sources.files import ModelFileError, local_projector
from app.server.cli import prepare


def gguf(path: Path) -> Path:
    path.write_bytes(b"GGUF" + b"\0" * 16)
    return path


def test_the_projector_beside_a_model_in_its_directory(tmp_path: Path) -> None:
    gguf(tmp_path / "model.gguf")
    projector = gguf(tmp_path / "mmproj-model-f16.gguf")
    assert local_projector(str(tmp_path), None, True) == projector
    assert local_projector(str(tmp_path), None, False) is None
    assert local_projector(str(tmp_path / "model.gguf"), None, True) is None  # a file: only --mmproj


def test_several_projectors_need_a_choice(tmp_path: Path) -> None:
    gguf(tmp_path / "mmproj-a.gguf")
    gguf(tmp_path / "mmproj-b.gguf")
    with pytest.raises(ModelFileError, match="several multimodal projectors"):
        local_projector(str(tmp_path), None, True)
    assert local_projector(str(tmp_path), str(tmp_path / "mmproj-b.gguf"), True) == tmp_path / "mmproj-b.gguf"


def test_a_missing_or_non_gguf_projector_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="projector file not found"):
        local_projector(None, str(tmp_path / "nope.gguf"), True)
    (tmp_path / "text.gguf").write_text("not gguf")
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        local_projector(None, str(tmp_path / "text.gguf"), True)
    with pytest.raises(SystemExit) as stop:
        prepare(["--mmproj", str(tmp_path / "nope.gguf")], {})
    assert stop.value.code == 1


def test_prepare_passes_the_found_projector_on(tmp_path: Path) -> None:
    gguf(tmp_path / "model.gguf")
    projector = gguf(tmp_path / "mmproj.gguf")
    settings, model, _, _ = prepare(["--model", str(tmp_path)], {})
    assert settings.mmproj == str(projector) and model == str(tmp_path / "model.gguf")
    settings, _, _, _ = prepare(["--model", str(tmp_path), "--no-mmproj"], {})
    assert settings.mmproj is None


def test_version_prints_the_versions_and_exits(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.metadata

    with pytest.raises(SystemExit) as stop:
        prepare(["--version"], {})
    assert stop.value.code == 0
    printed = capsys.readouterr().out
    assert f"llama-cpp-python {importlib.metadata.version('llama-cpp-python')}" in printed
    assert "vertex-llama" in printed
