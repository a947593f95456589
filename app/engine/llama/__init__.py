"""llama.cpp through llama-cpp-python's low-level bindings: the only package that imports llama_cpp.

    backend.py   LlamaBackend (model, context, batch, KV, LoRA, state files) and LlamaConfig
    vocab.py     tokenizer, pieces, built-in templates, grammars
    sampler.py   sampler chains and log-probabilities
    embedder.py  the embedding context
    media.py     the multimodal projector (libmtmd)
    ggml.py      llama.cpp's log bridge; ggml's loadable backends
"""

from app.engine.llama.backend import FitConfig, LlamaBackend, LlamaConfig, LoadConfig, RopeConfig
from app.engine.llama.ggml import load_ggml_backends, loaded_cpu_variant

__all__ = ["FitConfig", "LlamaBackend", "LlamaConfig", "LoadConfig", "RopeConfig", "load_ggml_backends",
           "loaded_cpu_variant"]
