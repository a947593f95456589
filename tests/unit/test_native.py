"""The C helpers (app/engine/llama/native.c): built by the install, the log filter passes on exactly the
lines Python would log, and the token scan finds what a per-token ctypes loop finds."""

from __future__ import annotations

import ctypes
import importlib.machinery
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.engine.llama import native
from app.engine.llama import vocab as vocab_module
from app.engine.llama.bindings import lc
from app.engine.llama.ggml import GGML_LOG_CONT, GGML_LOG_LEVELS, llama_log, lowest_logged_level, python_log_level
from app.engine.llama.vocab import LlamaVocabulary
from app.model_sources.files import embedded_model_path

NONE, DEBUG, INFO, WARN, ERROR = GGML_LOG_LEVELS


def test_the_install_built_the_library() -> None:
    """scripts/dev.sh's editable install (and the image's pip install) compile native.c: a server
    without it runs, only more slowly, so its absence must fail here rather than go unnoticed."""
    assert native.library_path() is not None
    assert native.native_library() is not None


def test_no_library_in_a_directory_without_one(tmp_path: Path) -> None:
    (tmp_path / "native.c").write_text("")
    assert native.library_path(tmp_path) is None
    assert native.load_library(None) is None


def test_a_library_that_does_not_load_is_none_not_a_failed_start(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A file of the right name that is no library for this machine: the server runs without it."""
    (tmp_path / f"{native.LIBRARY_STEM}{importlib.machinery.EXTENSION_SUFFIXES[0]}").write_bytes(b"not ELF")
    path = native.library_path(tmp_path)
    assert path is not None
    assert native.load_library(path) is None
    assert "run in Python" in caplog.text


@pytest.fixture
def forwarded() -> Iterator[tuple[object, list[tuple[int, bytes]]]]:
    """The filter pointed at a recording callback, and what it records."""
    lines: list[tuple[int, bytes]] = []

    @lc.llama_log_callback  # type: ignore[untyped-decorator]
    def record(level: int, text: bytes, _user: object) -> None:
        lines.append((level, text))

    yield record, lines
    native.native_library().vl_log_forward(None, GGML_LOG_CONT)  # nothing left pointing at ``record``


def send(callback: Any, lines: list[tuple[int, bytes]]) -> None:
    function = ctypes.cast(callback, lc.llama_log_callback)
    for level, text in lines:
        function(level, text, None)


def test_the_log_filter_passes_only_lines_at_or_above_its_level(
        forwarded: tuple[object, list[tuple[int, bytes]]]) -> None:
    record, seen = forwarded
    lines = [(DEBUG, b"d\n"), (INFO, b"loading"), (GGML_LOG_CONT, b"."), (WARN, b"w\n"), (ERROR, b"failed"),
             (GGML_LOG_CONT, b" because\n"), (INFO, b"i\n"), (GGML_LOG_CONT, b"...\n")]
    send(native.filtered_log_callback(record, ERROR), lines)
    assert seen == [(ERROR, b"failed"), (GGML_LOG_CONT, b" because\n")]  # a continuation follows its line
    seen.clear()
    send(native.filtered_log_callback(record, WARN), lines)
    assert seen == [(WARN, b"w\n"), (ERROR, b"failed"), (GGML_LOG_CONT, b" because\n")]
    seen.clear()
    every = [*lines, (NONE, b"plain\n")]
    send(native.filtered_log_callback(record, NONE), every)
    assert seen == every


@pytest.fixture
def log_levels() -> Iterator[None]:
    """The llama.cpp logger's and the root logger's levels, put back after the test."""
    saved = llama_log.level, logging.getLogger().level
    yield
    llama_log.setLevel(saved[0])
    logging.getLogger().setLevel(saved[1])


@pytest.mark.usefixtures("log_levels")
@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.parametrize(("logger_level", "root_level"), [(logging.WARNING, logging.INFO),
                                                          (logging.NOTSET, logging.DEBUG),
                                                          (logging.NOTSET, logging.INFO)])
def test_the_filter_level_is_the_lowest_python_would_log(verbose: bool, logger_level: int, root_level: int) -> None:
    """Every line below the level chosen would have been dropped by Python anyway."""
    llama_log.setLevel(logger_level)
    logging.getLogger().setLevel(root_level)
    lowest = lowest_logged_level(verbose)
    assert all(not llama_log.isEnabledFor(python_log_level(level, verbose))
               for level in GGML_LOG_LEVELS if level < lowest)
    assert lowest == GGML_LOG_CONT or llama_log.isEnabledFor(python_log_level(lowest, verbose))


@pytest.mark.usefixtures("log_levels")
def test_the_filter_levels_of_the_servers_log_settings() -> None:
    """app/server/logs.py sets the llama.cpp logger to WARNING unless -v: then errors only (and warnings
    with verbose); -v (NOTSET under a DEBUG root): every line, llama.cpp's plain LLAMA_LOG included."""
    llama_log.setLevel(logging.WARNING)
    assert (lowest_logged_level(False), lowest_logged_level(True)) == (ERROR, WARN)
    llama_log.setLevel(logging.NOTSET)
    logging.getLogger().setLevel(logging.DEBUG)
    assert (lowest_logged_level(False), lowest_logged_level(True)) == (NONE, NONE)


predicate_type = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_int32)


def test_the_token_scan_returns_every_match_past_its_first_buffer() -> None:
    multiples_of_three = predicate_type(lambda _vocab, token: token % 3 == 0)
    assert native.tokens_where(multiples_of_three, None, 1000) == tuple(range(0, 1000, 3))
    assert native.tokens_where(predicate_type(lambda _vocab, _token: False), None, 50) == ()


@pytest.fixture(scope="module")
def vocab_only_model() -> Iterator[Any]:
    """The embedded model, its vocabulary only (no weights): fast to load."""
    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(str(embedded_model_path()).encode(), params)
    assert model
    yield model
    lc.llama_model_free(model)


def test_the_scan_finds_the_models_end_of_generation_tokens(vocab_only_model: Any) -> None:
    vocab = lc.llama_model_get_vocab(vocab_only_model)
    n_tokens = lc.llama_vocab_n_tokens(vocab)
    expected = tuple(token for token in range(n_tokens) if lc.llama_vocab_is_eog(vocab, token))
    assert expected  # the model has some (SmolLM2: <|endoftext|>, <|im_end|>, ...)
    assert native.tokens_where(lc.llama_vocab_is_eog, vocab, n_tokens) == expected


def test_the_vocabulary_finds_the_same_tokens_without_the_library(vocab_only_model: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    vocab = lc.llama_model_get_vocab(vocab_only_model)
    with_library = LlamaVocabulary(vocab_only_model, vocab).eog_tokens()
    monkeypatch.setattr(vocab_module, "tokens_where", lambda *_args: None)  # as where native.c was not built
    assert LlamaVocabulary(vocab_only_model, vocab).eog_tokens() == with_library
    assert with_library
