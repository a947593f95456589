"""Loading a model file with llama.cpp's parameters, and fitting its context and GPU layers to the memory
there is (app/engine/memory_fit.py decides; this reads the model's shape for it)."""

from __future__ import annotations

import logging
from typing import Any

from app.engine.errors import ModelLoadError
from app.engine.llama.bindings import lc
from app.engine.llama.config import LlamaConfig
from app.engine.llama.params import model_params, model_shape
from app.engine.memory_fit import MIB, FitRequest, fit

log = logging.getLogger("app.engine.llama.backend")


def load_model(config: LlamaConfig, n_gpu_layers: int, metadata_only: bool = False) -> Any:
    """The model file, loaded (its metadata alone when ``metadata_only``); ModelLoadError if it cannot be."""
    params, keep = model_params(config.loading, n_gpu_layers)
    params.no_alloc = metadata_only
    model = lc.llama_model_load_from_file(config.model_path.encode(), params)
    del keep
    if not model:
        checked = " (--check-tensors: a tensor may hold invalid values; the log says)" if (
            config.loading.check_tensors) else ""
        raise ModelLoadError(f"llama.cpp could not load the model: {config.model_path}{checked}")
    return model


def fit_to_memory(config: LlamaConfig, model: Any, gpus: list[int]) -> tuple[int, int]:
    """The context and GPU layers that fit (app/engine/memory_fit.py), the choice logged."""
    shape = model_shape(model, config.cache_type_k, config.cache_type_v)
    fitted = fit(shape, gpus, config.fit.host_free_bytes, FitRequest(
        n_ctx=config.n_ctx, n_gpu_layers=None if config.fit.gpu_layers_auto else config.n_gpu_layers,
        n_ubatch=min(config.n_ubatch, config.n_batch), n_seq=config.n_seq, min_ctx=config.fit.min_ctx,
        margin_bytes=config.fit.margin_mib * MIB, kv_offload=config.kv_offload,
        host_reserved_bytes=config.fit.host_reserved_bytes))
    for note in fitted.notes:
        log.warning("--fit: %s (set --ctx-size / --n-gpu-layers, or --fit off)", note)
    return fitted.n_ctx if config.n_ctx == 0 else config.n_ctx, fitted.n_gpu_layers
