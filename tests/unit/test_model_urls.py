"""--model-url's checksum and cache path (the downloads themselves: tests/integration/test_model_urls.py)."""

from __future__ import annotations

from pathlib import Path

from app.model_sources.urls import _expected_sha256, _target, is_url_source

HEX = "ab" * 32


def test_the_expected_sha256_comes_from_the_fragment_or_a_sha256_etag() -> None:
    assert _expected_sha256(f"https://h/m.gguf#sha256={HEX.upper()}", '"other"') == HEX
    assert _expected_sha256("https://h/m.gguf", f'"{HEX}"') == HEX  # the Hugging Face Hub's ETag
    assert _expected_sha256("https://h/m.gguf", f'W/"{HEX}"') == HEX
    assert _expected_sha256("https://h/m.gguf", '"5d41402abc4b2a76b9719d911017c592"') is None  # an MD5 ETag
    assert _expected_sha256("https://h/m.gguf", "") is None


def test_the_cache_path_is_the_urls_own_and_keeps_the_file_name() -> None:
    one = _target(f"https://h/a/model.gguf#sha256={HEX}", Path("/c"))
    assert one == _target("https://h/a/model.gguf", Path("/c")) and one.name == "model.gguf"
    assert one.parent != _target("https://h/b/model.gguf", Path("/c")).parent
    assert is_url_source("https://h/m.gguf") and is_url_source("http://h/m.gguf")
    assert not is_url_source("gs://b/m.gguf") and not is_url_source(None)
