"""The backend's configs as llama.cpp's parameter structs (``llama_model_params``,
``llama_context_params``), and the shape of a loaded model that the fit to memory needs."""

from __future__ import annotations

import ctypes
import logging
from typing import Any

from app.engine.errors import ModelLoadError
from app.engine.llama.bindings import lc
from app.engine.llama.config import LlamaConfig, LoadConfig
from app.engine.llama.ggml import buffer_types, offload_device
from app.engine.llama.vocab import model_meta
from app.engine.memory_fit import ModelShape
from app.engine.types import KV_CACHE_TYPES, LAZY_MODES, LOAD_MODES, NUMA_STRATEGIES, SPLIT_MODES

log = logging.getLogger("app.engine.llama.backend")

_FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
# ggml's type numbers of the KV cache types llama-server takes (ggml.h's enum ggml_type)
_GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
assert set(_GGML_TYPES) == set(KV_CACHE_TYPES)
_ROPE_SCALING = {"unspecified": -1, "none": 0, "linear": 1, "yarn": 2}
# llama.h's enum llama_load_mode, llama_lazy_mode, llama_split_mode; ggml-cpu.h's ggml_numa_strategy
_LOAD_MODE = {"auto": -1, "none": 0, "mmap": 1, "mlock": 2, "mmap+mlock": 3, "dio": 4}
_LAZY_MODE = {"off": 0, "auto": 1, "on": 2}
_SPLIT_MODE = {"none": 0, "layer": 1, "row": 2, "tensor": 3}
NUMA_NUMBERS = {"distribute": 1, "isolate": 2, "numactl": 3}
assert (set(_LOAD_MODE), set(_LAZY_MODE), set(_SPLIT_MODE), set(NUMA_NUMBERS)) == (
    set(LOAD_MODES), set(LAZY_MODES), set(SPLIT_MODES), set(NUMA_STRATEGIES))

_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
               "q5_0": 22 / 32, "q5_1": 24 / 32, "iq4_nl": 18 / 32}  # per element, ggml's block sizes
assert set(_TYPE_BYTES) == set(KV_CACHE_TYPES)


class BufferTypeOverride(ctypes.Structure):
    """llama.h's ``struct llama_model_tensor_buft_override`` (the bindings leave the field a void pointer)."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def tensor_placement(params: Any, config: LoadConfig, keep: list[Any]) -> None:
    """--override-tensor (and --cpu-moe's) buffer types and --device's devices, into ``params``."""
    if config.tensor_overrides:
        types = buffer_types()
        limit = int(lc.llama_max_tensor_buft_overrides())
        if len(config.tensor_overrides) >= limit:
            raise ModelLoadError(f"{len(config.tensor_overrides)} tensor overrides: llama.cpp takes at most "
                                 f"{limit - 1}")
        overrides = (BufferTypeOverride * (len(config.tensor_overrides) + 1))()  # a NULL pattern ends the list
        for slot, override in zip(overrides, config.tensor_overrides, strict=False):
            if override.buffer_type not in types:
                raise ModelLoadError(f"--override-tensor {override.pattern}={override.buffer_type}: unknown buffer "
                                     f"type (available: {', '.join(sorted(types))})")
            slot.pattern, slot.buft = override.pattern.encode(), types[override.buffer_type]
        params.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p)
        keep.append(overrides)
    if config.devices is not None:
        devices = (ctypes.c_void_p * (len(config.devices) + 1))(*(offload_device(name) for name in config.devices))
        params.devices = ctypes.cast(devices, ctypes.c_void_p)  # NULL-terminated; only NULL: no offload
        keep.append(devices)


def model_params(config: LoadConfig, n_gpu_layers: int) -> tuple[Any, list[Any]]:
    """llama_model_params for ``config``, and the ctypes arrays they point at (keep them alive until
    the model is loaded)."""
    params = lc.llama_model_default_params()
    params.n_gpu_layers = n_gpu_layers
    params.load_mode = _LOAD_MODE[config.load_mode]
    params.lazy_mode = _LAZY_MODE[config.lazy_mode]
    params.check_tensors = config.check_tensors
    params.split_mode = _SPLIT_MODE[config.split_mode]
    params.main_gpu = config.main_gpu
    params.use_extra_bufts = config.repack
    params.no_host = config.no_host
    keep: list[Any] = []
    if config.tensor_split:
        devices = int(lc.llama_max_devices())
        if len(config.tensor_split) > devices:
            raise ModelLoadError(f"--tensor-split gives {len(config.tensor_split)} fractions; this build takes at "
                                 f"most {devices} devices")
        split = (ctypes.c_float * devices)(*config.tensor_split)
        params.tensor_split = ctypes.cast(split, ctypes.POINTER(ctypes.c_float))
        keep.append(split)
    if config.kv_overrides:
        overrides = (lc.llama_model_kv_override * (len(config.kv_overrides) + 1))()  # an empty key ends the list
        for slot, override in zip(overrides, config.kv_overrides, strict=False):
            slot.key = override.key.encode()
            value = override.value
            if isinstance(value, bool):
                slot.tag, slot.value.val_bool = lc.LLAMA_KV_OVERRIDE_TYPE_BOOL, value
            elif isinstance(value, int):
                slot.tag, slot.value.val_i64 = lc.LLAMA_KV_OVERRIDE_TYPE_INT, value
            elif isinstance(value, float):
                slot.tag, slot.value.val_f64 = lc.LLAMA_KV_OVERRIDE_TYPE_FLOAT, value
            else:
                slot.tag, slot.value.val_str = lc.LLAMA_KV_OVERRIDE_TYPE_STR, value.encode()
        params.kv_overrides = ctypes.cast(overrides, ctypes.POINTER(lc.llama_model_kv_override))
        keep.append(overrides)
    tensor_placement(params, config, keep)
    return params, keep


def context_params(config: LlamaConfig, n_ctx: int) -> Any:
    """llama_context_params for the generation context of ``config``, ``n_ctx`` tokens in all."""
    params = lc.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = config.n_batch
    params.n_ubatch = min(config.n_ubatch, config.n_batch)
    params.n_seq_max = config.n_seq
    # a sequence whose sampler runs in the graph may have this many outputs in one decode (its token and a
    # draft), as llama-server sizes it (common_speculative_get_output_limits)
    params.n_outputs_max_per_seq = max(1, min(config.n_batch, config.outputs_per_seq))
    params.n_threads = config.n_threads
    params.n_threads_batch = config.n_threads_batch
    params.kv_unified = config.kv_unified
    params.offload_kqv = config.kv_offload
    params.op_offload = config.op_offload
    params.swa_full = config.swa_full
    params.flash_attn_type = _FLASH_ATTN[config.flash_attn]
    params.type_k = _GGML_TYPES[config.cache_type_k]
    params.type_v = _GGML_TYPES[config.cache_type_v]
    rope = config.rope
    params.rope_scaling_type = _ROPE_SCALING[rope.scaling]
    params.rope_freq_base = rope.freq_base
    params.rope_freq_scale = rope.freq_scale
    params.yarn_orig_ctx = rope.yarn_orig_ctx
    params.yarn_ext_factor = rope.yarn_ext_factor
    params.yarn_attn_factor = rope.yarn_attn_factor
    params.yarn_beta_fast = rope.yarn_beta_fast
    params.yarn_beta_slow = rope.yarn_beta_slow
    params.no_perf = not config.perf
    return params


def capped_slot_context(n_ctx_seq: int, cap: int) -> int:
    """A slot's context, held to --kv-unified-per-slot (llama-server's ``n_ctx_slot``), said in the log."""
    if cap <= 0:
        return n_ctx_seq
    if n_ctx_seq > cap:
        log.info("capping each slot's context (%d) to --kv-unified-per-slot (%d)", n_ctx_seq, cap)
    elif cap > n_ctx_seq:
        log.warning("--kv-unified-per-slot (%d) exceeds a slot's share of the context (%d): it has no effect "
                    "(raise --ctx-size, or unset it to size the context to --parallel x --kv-unified-per-slot)",
                    cap, n_ctx_seq)
    return min(n_ctx_seq, cap)


def model_shape(model: Any, type_k: str, type_v: str) -> ModelShape:
    """What the fit needs of a loaded model (or of one loaded with its metadata only)."""
    arch = model_meta(model, "general.architecture") or ""
    n_embd, n_head = int(lc.llama_model_n_embd(model)), max(1, int(lc.llama_model_n_head(model)))
    n_head_kv = max(1, int(lc.llama_model_n_head_kv(model)))

    def head_dim(key: str) -> int:
        value = model_meta(model, f"{arch}.attention.{key}")
        return int(value) if value and value.isdigit() else n_embd // n_head

    per_layer = n_head_kv * (head_dim("key_length") * _TYPE_BYTES[type_k] + head_dim("value_length") *
                             _TYPE_BYTES[type_v])
    n_layer = int(lc.llama_model_n_layer(model))
    return ModelShape(n_layer=n_layer, n_ctx_train=int(lc.llama_model_n_ctx_train(model)), n_embd=n_embd,
                      n_vocab=int(lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))),
                      weight_bytes=int(lc.llama_model_size(model)), kv_bytes_per_token=int(per_layer * n_layer))
