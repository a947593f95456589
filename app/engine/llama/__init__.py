"""llama.cpp through llama-cpp-python's low-level bindings: the only package that imports llama_cpp.

    bindings.py  llama_cpp's ctypes bindings, without its high-level package (the one importer)
    backend.py   LlamaBackend (model, context, batch, KV, LoRA, state files)
    config.py    LlamaConfig and its parts: plain values, no llama_cpp (the settings make them)
    params.py    those configs as llama.cpp's parameter structs; a loaded model's shape
    vocab.py     tokenizer, pieces, built-in templates, grammars
    sampler.py   sampler chains
    logits.py    log-probabilities and the greedy pick, read from a row of logits (the one numpy user)
    embedder.py  the embedding context
    media.py     the multimodal projector (libmtmd)
    ggml.py      llama.cpp's log bridge; ggml's loadable backends
    native.py    the C helpers of native.c (a log filter, a vocabulary scan), where the install built them

The names below are imported on first use: the worker imports ``ggml`` on a thread of its own to set
up llama.cpp (its backends) while its main thread imports the engine (app/server/gunicorn_server.py).
"""

from typing import TYPE_CHECKING

from app.engine.lazy import lazy_exports

if TYPE_CHECKING:
    from app.engine.llama.backend import LlamaBackend
    from app.engine.llama.config import FitConfig, LlamaConfig, LoadConfig, RopeConfig
    from app.engine.llama.ggml import loaded_cpu_variant, set_up_llama_cpp

_LAZY = {
    "FitConfig": "app.engine.llama.config",
    "LlamaBackend": "app.engine.llama.backend",
    "LlamaConfig": "app.engine.llama.config",
    "LoadConfig": "app.engine.llama.config",
    "RopeConfig": "app.engine.llama.config",
    "loaded_cpu_variant": "app.engine.llama.ggml",
    "set_up_llama_cpp": "app.engine.llama.ggml",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["FitConfig", "LlamaBackend", "LlamaConfig", "LoadConfig", "RopeConfig", "loaded_cpu_variant",
           "set_up_llama_cpp"]
