"""llama.cpp through llama-cpp-python's low-level bindings: the only package that imports llama_cpp.

    bindings.py  llama_cpp's ctypes bindings, without its high-level package (the one importer)
    backend.py   LlamaBackend (model, context, batch, KV, LoRA, state files) and LlamaConfig
    vocab.py     tokenizer, pieces, built-in templates, grammars
    sampler.py   sampler chains
    logits.py    log-probabilities and the greedy pick, read from a row of logits (the one numpy user)
    embedder.py  the embedding context
    media.py     the multimodal projector (libmtmd)
    ggml.py      llama.cpp's log bridge; ggml's loadable backends
    native.py    the C helpers of native.c (a log filter, a vocabulary scan), where the install built them
"""

from app.engine.llama.backend import FitConfig, LlamaBackend, LlamaConfig, LoadConfig, RopeConfig
from app.engine.llama.ggml import load_ggml_backends, loaded_cpu_variant

__all__ = ["FitConfig", "LlamaBackend", "LlamaConfig", "LoadConfig", "RopeConfig", "load_ggml_backends",
           "loaded_cpu_variant"]
