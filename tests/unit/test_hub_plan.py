"""Which files of a Hugging Face repository -hf takes, as the pinned llama.cpp's
common/download.cpp picks them: the tag, its defaults, split parts, the projector beside it."""

from __future__ import annotations

import pytest

from app.config.settings import SettingsError, parse_settings
from app.model_sources.hub import HubError, plan_files, split_repo_tag

FILES = ["README.md", "model-Q8_0.gguf", "model-Q4_K_M.gguf", "model-f16.gguf", "mmproj-model-f16.gguf",
         "mmproj-model-Q8_0.gguf", "imatrix.gguf", "big/model-Q2_K-00001-of-00003.gguf",
         "big/model-Q2_K-00003-of-00003.gguf", "big/model-Q2_K-00002-of-00003.gguf"]


def test_the_default_tags_then_the_first_model() -> None:
    assert plan_files(FILES, "", None, False).model_files == ("model-Q4_K_M.gguf",)
    assert plan_files([f for f in FILES if "Q4_K_M" not in f], "", None, False).model_files == ("model-Q8_0.gguf",)
    assert plan_files(["imatrix.gguf", "x-f16.gguf"], "", None, False).model_files == ("x-f16.gguf",)


def test_a_tag_picks_its_file_case_insensitively_and_a_split_model_comes_whole() -> None:
    assert plan_files(FILES, "f16", None, False).model_files == ("model-f16.gguf",)
    assert plan_files(FILES, "Q2_K", None, False).model_files == (
        "big/model-Q2_K-00001-of-00003.gguf", "big/model-Q2_K-00002-of-00003.gguf",
        "big/model-Q2_K-00003-of-00003.gguf")


def test_the_projector_closest_in_quantization_beside_the_model() -> None:
    assert plan_files(FILES, "Q8_0", None, True).mmproj == "mmproj-model-Q8_0.gguf"
    assert plan_files(FILES, "f16", None, True).mmproj == "mmproj-model-f16.gguf"
    assert plan_files(FILES, "Q2_K", None, True).mmproj == "mmproj-model-Q8_0.gguf"  # a folder above it counts
    assert plan_files(FILES, "Q8_0", None, False).mmproj is None
    assert plan_files(["a-Q4_K_M.gguf"], "", None, True).mmproj is None


def test_a_named_file_and_the_errors() -> None:
    assert plan_files(FILES, "", "model-f16.gguf", False).model_files == ("model-f16.gguf",)
    with pytest.raises(HubError, match=r"'nope\.gguf' is not in the repository .*model-Q8_0\.gguf"):
        plan_files(FILES, "", "nope.gguf", False)
    with pytest.raises(HubError, match="has no GGUF file tagged Q5_K_S"):
        plan_files(FILES, "Q5_K_S", None, False)
    with pytest.raises(HubError, match="it has no GGUF files"):
        plan_files(["README.md"], "", None, False)


def test_repository_forms() -> None:
    assert split_repo_tag("me/repo") == ("me/repo", "")
    assert split_repo_tag("me/repo:Q4_0") == ("me/repo", "Q4_0")
    for bad in ("repo", "me/", "a/b/c"):
        with pytest.raises(HubError):
            split_repo_tag(bad)
    with pytest.raises(SettingsError, match="expected <user>/<model>"):
        parse_settings(["-hf", "justone"], {}, error=lambda message: None)
    with pytest.raises(SettingsError, match="give one"):
        parse_settings(["-hf", "me/repo", "-m", "x.gguf"], {}, error=lambda message: None)
    with pytest.raises(SettingsError, match="give --hf-repo too"):
        parse_settings(["-hff", "x.gguf"], {}, error=lambda message: None)
