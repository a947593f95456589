"""The C helpers of native.c, loaded with ctypes: llama.cpp's log lines filtered by level before they
take the GIL, and a scan of the vocabulary for the tokens a llama.cpp predicate holds for.

setuptools builds native.c as an optional extension (pyproject.toml): where it could not (no C
compiler), ``native_library()`` is None and the callers do the same work in Python, more slowly.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LIBRARY_STEM = "_native"  # the extension's name in pyproject.toml: app.engine.llama._native


def library_path(directory: Path = Path(__file__).parent) -> Path | None:
    """The built library beside this file (``_native.cpython-311-x86_64-linux-gnu.so``, say)."""
    candidates = (directory / f"{LIBRARY_STEM}{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES)
    return next((path for path in candidates if path.is_file()), None)


@functools.cache
def native_library() -> Any:
    """The loaded library (a ctypes.CDLL with its functions typed), or None where it was not built."""
    return load_library(library_path())


def load_library(path: Path | None) -> Any:
    """The library at ``path``, its functions typed; None (and why, logged) where there is none or it
    does not load (built for another machine, say)."""
    if path is None:
        log.info("llama.cpp's log lines and vocabulary scans run in Python: the C helpers (native.c) "
                 "were not built (no C compiler at install time?)")
        return None
    try:
        library = ctypes.CDLL(str(path))
    except OSError as exc:
        log.warning("llama.cpp's log lines and vocabulary scans run in Python: %s", exc)
        return None
    library.vl_log_forward.argtypes = [ctypes.c_void_p, ctypes.c_int]
    library.vl_log_forward.restype = None
    library.vl_tokens_where.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                                        ctypes.POINTER(ctypes.c_int32), ctypes.c_int32]
    library.vl_tokens_where.restype = ctypes.c_int32
    return library


def filtered_log_callback(forward: Any, lowest_level: int) -> Any:
    """A C log callback that passes ``forward`` (a ctypes callback) only the lines at ggml level
    ``lowest_level`` or above (a continuation line goes where its line went); None without the
    library. ``forward`` must outlive it: the caller keeps it."""
    library = native_library()
    if library is None:
        return None
    library.vl_log_forward(ctypes.cast(forward, ctypes.c_void_p), lowest_level)
    return ctypes.cast(library.vl_log_filter, ctypes.c_void_p)


def tokens_where(predicate: Any, vocab: Any, n_tokens: int) -> tuple[int, ...] | None:
    """The ids in ``0..n_tokens-1`` for which the C function ``predicate(vocab, id)`` (a ctypes
    function of llama.cpp, such as ``llama_vocab_is_eog``) is true; None without the library."""
    library = native_library()
    if library is None:
        return None
    pointer = ctypes.cast(predicate, ctypes.c_void_p)
    capacity = 64
    while True:
        found = (ctypes.c_int32 * capacity)()
        count = int(library.vl_tokens_where(pointer, vocab, n_tokens, found, capacity))
        if count <= capacity:
            return tuple(found[:count])
        capacity = count
